package manifest

import (
	"context"
	"fmt"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// DebounceInterval is how long Watch waits after the last file event before reloading, so an
// editor's save (write, rename, chmod) or a ConfigMap update costs one reload.
const DebounceInterval = 100 * time.Millisecond

// MaxReloadDelay caps the wait from the first event of a burst to the reload: a directory that
// never stops changing (a generator rewriting files all the time) is still reloaded this often,
// instead of never.
const MaxReloadDelay = time.Second

// Watch loads dir, calls onChange with the result, then calls it again with a complete new load
// after every burst of changes in the directory, until ctx is cancelled. Any event except a
// bare chmod triggers a reload (cheap, and it catches ConfigMap symlink swaps). onChange is
// called from Watch's goroutine, one call at a time. Watch returns nil when ctx is cancelled and
// an error if the directory cannot be watched.
func Watch(ctx context.Context, dir string, logger logr.Logger, onChange func(Objects, []FileError)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch manifest directory %s: %w", dir, err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch manifest directory %s: %w", dir, err)
	}
	reload := func() {
		objs, errs := Load(dir)
		logger.V(1).Info("Loaded manifests", "dir", dir, "services", len(objs.Services),
			"endpointSlices", len(objs.EndpointSlices), "nodes", len(objs.Nodes), "errors", len(errs))
		onChange(objs, errs)
	}
	reload()
	timer := time.NewTimer(DebounceInterval)
	timer.Stop()
	defer timer.Stop()
	var burstStart time.Time // first event not yet reloaded; zero when none waits
	arm := func() {
		now := time.Now()
		if burstStart.IsZero() {
			burstStart = now
		}
		wait := DebounceInterval
		if left := MaxReloadDelay - now.Sub(burstStart); left < wait {
			wait = max(left, 0)
		}
		timer.Reset(wait)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return fmt.Errorf("watch manifest directory %s: event channel closed", dir)
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			arm()
		case err, ok := <-w.Errors:
			if !ok {
				return fmt.Errorf("watch manifest directory %s: error channel closed", dir)
			}
			logger.Error(err, "Manifest directory watch error; reloading", "dir", dir)
			arm()
		case <-timer.C:
			burstStart = time.Time{}
			reload()
		}
	}
}

// Feeder applies successive loads to a Tracker as a diff: every loaded object is upserted (the
// Tracker ignores unchanged ones) and objects that disappeared are deleted. An object whose file
// failed to load is kept as last fed, so saving a half-edited file does not take its Services
// down; deleting the file does. A Feeder is not safe for concurrent use; Watch's serial callback
// is the intended caller.
type Feeder struct {
	tracker *model.Tracker
	fed     map[Ref]string // object -> file it was fed from
}

// NewFeeder returns a Feeder for t that has fed nothing yet.
func NewFeeder(t *model.Tracker) *Feeder {
	return &Feeder{tracker: t, fed: map[Ref]string{}}
}

// Feed applies objs, loaded with errs, to the Tracker.
func (f *Feeder) Feed(objs Objects, errs []FileError) {
	failed := map[string]bool{}
	for _, e := range errs {
		failed[e.File] = true
	}
	next := make(map[Ref]string, len(objs.From))
	for ref, file := range objs.From {
		next[ref] = file
	}
	for ref, file := range f.fed {
		if _, ok := next[ref]; !ok && failed[file] {
			next[ref] = file // keep the last good version
		}
	}
	// Deletions first: an object that moved between files is in both sets and stays.
	for ref := range f.fed {
		if _, ok := next[ref]; ok {
			continue
		}
		switch ref.Kind {
		case "Service":
			f.tracker.DeleteService(model.ServiceKey{Namespace: ref.Namespace, Name: ref.Name})
		case "EndpointSlice":
			f.tracker.DeleteEndpointSlice(ref.Namespace, ref.Name)
		case "Node":
			f.tracker.DeleteNode(ref.Name)
		}
	}
	for _, n := range objs.Nodes {
		f.tracker.UpsertNode(n)
	}
	for _, s := range objs.EndpointSlices {
		f.tracker.UpsertEndpointSlice(s)
	}
	for _, s := range objs.Services {
		f.tracker.UpsertService(s)
	}
	f.fed = next
}
