package manifest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// DebounceInterval is how long Watch waits after the last file event before reloading, so an
// editor's save (write, rename, chmod) or a ConfigMap update costs one reload.
const DebounceInterval = 100 * time.Millisecond

// MaxReloadDelay caps the wait from the first event of a burst to the reload: a directory that
// never stops changing (a generator rewriting files all the time) is still reloaded this often,
// instead of never. Within it the cap adapts to what a reload costs: twice the last reload's
// time, and at least MinReloadDelay. A reload decodes only the files inotify named, so under a
// steady churn a change reaches the rules in a fraction of a second, while an expensive reload
// still takes at most a third of the time.
const MaxReloadDelay = time.Second

// MinReloadDelay is the least wait from the first event of a burst to the reload under a steady
// churn (see MaxReloadDelay): the debounce interval itself. At 10,000 Services and 1000 file
// rewrites a second a reload takes about 30 ms, so the cap stays at this floor and a change
// waits about 100 ms for its reload (at a floor of 250 ms that wait was most of its latency).
const MinReloadDelay = DebounceInterval

// reloadCap is the longest a burst waits for its reload after a reload that took cost.
func reloadCap(cost time.Duration) time.Duration {
	return min(MaxReloadDelay, max(MinReloadDelay, 2*cost))
}

// PollInterval is how often a Watcher looks for its directory again while the directory is
// missing or unreadable (no inotify watch can wait for a path that does not exist).
const PollInterval = time.Second

// SettleInterval is how long a file written in place (an inotify write event on it: `cp`, a
// shell's `>`, an editor that does not save by rename) must go without being written before it
// is loaded: a file loaded between two writes of its writer is half-written, and may decode
// (a truncated list of endpoints) or be empty. Files renamed into the directory (editors,
// fixture writers) and a ConfigMap's "..data" swap are complete and are not waited for.
const SettleInterval = 500 * time.Millisecond

// MaxSettleWait bounds the wait for a file written in place that never stops being written (a
// log-like generator): it is loaded this long after the first write of the streak anyway.
const MaxSettleWait = 5 * time.Second

// Watcher loads a directory, then loads it again after every burst of changes, and survives the
// directory going away: while it cannot be read, the last good load stays in force (OnLoad is
// not called), the failure is logged once and exposed through FailingSince and OnFailure, and
// the directory is looked for every PollInterval; when it is back, the inotify watch is set up
// again on the new directory and it is reloaded.
//
// A file that cannot be used keeps its last good objects (see FileError); one that cannot be
// read (a stat, open or read error) is tried again every PollInterval. A file written in
// place is loaded once it has settled (SettleInterval).
type Watcher struct {
	Dir    string
	Loader Loader
	Log    logr.Logger
	// OnLoad receives each complete load of a readable directory, one call at a time, from Run's
	// goroutine.
	OnLoad func(Objects, []FileError)
	// OnFailure, if set, is called from Run's goroutine when the source becomes unhealthy: the
	// directory cannot be read, or a file of it cannot be used (once per streak, with the
	// error), and when it is healthy again (with nil).
	OnFailure func(err error)
	// Settle and MaxSettle replace SettleInterval and MaxSettleWait when set.
	Settle, MaxSettle time.Duration

	failingSince atomic.Int64 // unix nanoseconds; 0 while the source is healthy
}

// FailingSince is when the directory became unreadable or a file of it could not be used,
// zero while every file loads. Safe to call from any goroutine (/healthz).
func (w *Watcher) FailingSince() time.Time {
	if n := w.failingSince.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// Watch runs a Watcher for dir with the default Loader; see Watcher.
func Watch(ctx context.Context, dir string, logger logr.Logger, onChange func(Objects, []FileError)) error {
	return (&Watcher{Dir: dir, Log: logger, OnLoad: onChange}).Run(ctx)
}

// Run loads the directory and reloads it after every burst of changes until ctx is cancelled.
// Any event on a manifest file except a bare chmod triggers a reload of the files named; an
// event on the directory itself, on a ConfigMap's "..data" machinery or a watch error triggers
// a reload of the whole directory (see fileCache). Run returns nil when ctx is cancelled, and an error only if no watch can be created
// at all (inotify exhausted); a missing directory is waited for, not an error.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch manifest directory %s: %w", w.Dir, err)
	}
	defer fw.Close()
	dir := filepath.Clean(w.Dir)
	watching := false
	var failing error
	poll := time.NewTimer(PollInterval)
	poll.Stop()
	defer poll.Stop()
	cache := newFileCache() // what the last load got from each file
	if g := (lastGood{dir: w.Loader.LastGoodDir}); g.enabled() {
		cache.copier = newCopier(g, w.Loader.Log)
		cctx, stop := context.WithCancel(context.Background())
		copied := make(chan struct{})
		go func() { cache.copier.run(cctx); close(copied) }()
		defer func() { stop(); <-copied }() // the copies of the last loads are written
	}
	var lastCost time.Duration // what the last reload took, load and OnLoad
	// changed holds the files named by events since the last reload; full is set when a
	// reload must list the directory again (see fileCache): at the start, after the directory
	// itself changed or could not be read, after a watch error (an inotify queue overflow loses
	// names), on a ConfigMap's "..data" swap (its files are symlinks that do not change
	// themselves), and while polling.
	changed := map[string]bool{}
	full := true
	timer := time.NewTimer(DebounceInterval) // the debounce, and the settling of files written in place
	timer.Stop()
	defer timer.Stop()
	// writes holds the files written in place since they were last loaded (see SettleInterval).
	writes := map[string]writeStreak{}
	// retry names the files that could not be read at the last load, read again at each poll.
	var retry []string
	unhealthy := false
	health := func(err error) {
		switch {
		case err != nil && !unhealthy:
			unhealthy = true
			w.failingSince.Store(time.Now().UnixNano())
			if w.OnFailure != nil {
				w.OnFailure(err)
			}
		case err == nil && unhealthy:
			unhealthy = false
			w.failingSince.Store(0)
			if w.OnFailure != nil {
				w.OnFailure(nil)
			}
		}
	}
	// reload loads the directory; waited is how long its first change waited for it (the
	// debounce and the reload cap), logged with what the reload itself took. Files still being
	// written are left as they are and reloaded once settled, by timer.
	reload := func(waited time.Duration) {
		start := time.Now()
		defer func() { lastCost = time.Since(start) }()
		hold, settleWait := w.settling(writes, start)
		cache.hold = hold
		for name := range hold {
			delete(changed, name)
		}
		defer func() {
			cache.hold = nil
			for name := range hold {
				changed[name] = true
			}
			if len(hold) > 0 {
				timer.Reset(settleWait)
			}
		}()
		if !full && watching && failing == nil && len(changed) == 0 {
			return // only files still being written
		}
		if !watching { // before loading, so an edit made meanwhile is not missed
			if err := fw.Add(dir); err == nil {
				watching = true
			}
		}
		var objs Objects
		var errs []FileError
		kind := "named files"
		if full || !watching || failing != nil {
			kind = "full"
			objs, errs = w.Loader.load(dir, cache)
		} else {
			objs, errs = w.Loader.loadChanged(dir, cache, changed)
		}
		full, changed = DirectoryError(errs) != nil, map[string]bool{}
		if derr := DirectoryError(errs); derr != nil {
			if watching {
				_ = fw.Remove(dir)
				watching = false
			}
			if failing == nil {
				w.Log.Error(derr, "Manifest directory cannot be read; the Services loaded last stay as they are until it is back", "dir", dir, "retryEvery", PollInterval)
			}
			health(derr)
			failing = derr
			poll.Reset(PollInterval)
			return
		}
		if !watching {
			w.Log.Info("Manifest directory can be read but not watched; looking for changes by polling", "dir", dir, "every", PollInterval)
			poll.Reset(PollInterval)
		}
		if failing != nil {
			failing = nil
			w.Log.Info("Manifest directory is back; reloading it", "dir", dir)
		}
		bad := BadFiles(errs)
		retry = retry[:0]
		for _, e := range bad {
			if e.Unreadable {
				retry = append(retry, e.File)
			}
		}
		if len(retry) > 0 {
			poll.Reset(PollInterval)
		}
		if len(bad) > 0 {
			health(badFilesError(bad))
		} else {
			health(nil)
		}
		w.Log.V(1).Info("Loaded manifests", "dir", dir, "reload", kind, "decodedFiles", cache.decoded, "services", len(objs.Services), "refused", len(objs.Refused),
			"endpointSlices", len(objs.EndpointSlices), "nodes", len(objs.Nodes), "errors", len(errs), "waited", waited, "took", time.Since(start))
		w.OnLoad(objs, errs)
	}
	reload(0)
	var burstStart time.Time // first event not yet reloaded; zero when none waits
	arm := func() {
		now := time.Now()
		if burstStart.IsZero() {
			burstStart = now
		}
		wait := DebounceInterval
		if left := reloadCap(lastCost) - now.Sub(burstStart); left < wait {
			wait = max(left, 0)
		}
		timer.Reset(wait)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return fmt.Errorf("watch manifest directory %s: event channel closed", dir)
			}
			if ev.Op == fsnotify.Chmod {
				continue
			}
			name := filepath.Clean(ev.Name)
			base := filepath.Base(name)
			switch {
			case name == dir:
				full = true
				if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
					// The directory itself was moved or deleted: the watch follows the old
					// inode, so drop it; the reload sets one up on whatever is at the path then.
					_ = fw.Remove(dir)
					watching = false
				}
			case filepath.Dir(name) != dir || strings.HasPrefix(base, ".."):
				full = true // a ConfigMap's ..data swap, or a name this watch cannot place
			case isManifestName(base):
				changed[base] = true
				if ev.Op&(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) != 0 {
					delete(writes, base) // a new file (renamed in, or to be written) or none
				}
				if ev.Op&fsnotify.Write != 0 {
					ws := writes[base]
					if ws.first.IsZero() {
						ws.first = time.Now()
					}
					ws.last = time.Now()
					writes[base] = ws
				}
			default:
				continue // not a manifest file (an editor's or a writer's temporary file)
			}
			arm()
		case err, ok := <-fw.Errors:
			if !ok {
				return fmt.Errorf("watch manifest directory %s: error channel closed", dir)
			}
			w.Log.Error(err, "Manifest directory watch error; reloading the whole directory", "dir", dir)
			full = true
			arm()
		case <-timer.C:
			var waited time.Duration // zero when only files settling waited
			if !burstStart.IsZero() {
				waited = time.Since(burstStart)
			}
			burstStart = time.Time{}
			reload(waited)
		case <-poll.C:
			if failing != nil || !watching {
				full = true
			}
			for _, name := range retry {
				changed[name] = true
			}
			reload(0)
		}
	}
}

// writeStreak is when a file written in place was first and last written since it was loaded.
type writeStreak struct{ first, last time.Time }

// settling returns the files of writes still being written at now (written within the settle
// interval, for less than the longest settle wait), and how long until the first of them
// settles; the others are dropped from writes, to be loaded now.
func (w *Watcher) settling(writes map[string]writeStreak, now time.Time) (map[string]bool, time.Duration) {
	settle, maxWait := w.Settle, w.MaxSettle
	if settle <= 0 {
		settle = SettleInterval
	}
	if maxWait <= 0 {
		maxWait = MaxSettleWait
	}
	var hold map[string]bool
	var wait time.Duration
	for name, ws := range writes {
		until := ws.last.Add(settle)
		if limit := ws.first.Add(maxWait); limit.Before(until) {
			until = limit
		}
		if !now.Before(until) {
			delete(writes, name)
			continue
		}
		if hold == nil {
			hold = map[string]bool{}
		}
		hold[name] = true
		if d := until.Sub(now); wait == 0 || d < wait {
			wait = d
		}
	}
	return hold, wait
}

// badFilesError summarises the files that could not be used, for OnFailure.
func badFilesError(bad []FileError) error {
	if len(bad) == 1 {
		return bad[0]
	}
	return fmt.Errorf("%d manifest files cannot be used, the first: %w", len(bad), bad[0])
}

// Feeder applies successive loads to a Tracker as a diff: every loaded object is upserted (the
// Tracker ignores unchanged ones) and objects that disappeared are deleted. An object whose file
// failed to load is kept as last fed, so saving a half-edited file does not take its Services
// down; deleting the file does. A Feeder is not safe for concurrent use; Watch's serial callback
// is the intended caller.
type Feeder struct {
	tracker *model.Tracker
	// Each kind's objects fed, by namespace and name, with the file each was fed from and the
	// object itself: a reload hands out the very same objects for files that did not change
	// (the Watcher's cache; Services unless the node-port assigner gave them new ports), which
	// need not be compared with themselves again (at 10,000 Services comparing them took 130 ms
	// of every reload). A map per kind, keyed without the kind, takes a third less than one
	// keyed by Ref (2.6 MB at 10,000 Services and their slices).
	services fedSet[*corev1.Service]
	slices   fedSet[*model.EndpointSlice]
	nodes    fedSet[*corev1.Node]
	keepNode string // see KeepNode
}

// objectName is a namespace and name (an empty namespace for Nodes).
type objectName struct{ namespace, name string }

// fedSet holds the objects of one kind fed.
type fedSet[T comparable] map[objectName]fedObject[T]

// fedObject is what the Feeder fed for one object: obj is the zero T for a refused Service (fed
// as a rejection every time).
type fedObject[T comparable] struct {
	file string
	obj  T
}

// next is the set of a load: every object of objs.From of this kind (its obj still to be
// set by fresh), and the objects fed last whose file failed, as last fed.
func (last fedSet[T]) next(from map[Ref]string, kind string, failed map[string]bool) fedSet[T] {
	n := 0
	for ref := range from {
		if ref.Kind == kind {
			n++
		}
	}
	out := make(fedSet[T], n)
	for ref, file := range from {
		if ref.Kind == kind {
			out[objectName{ref.Namespace, ref.Name}] = fedObject[T]{file: file}
		}
	}
	for k, e := range last {
		if _, ok := out[k]; !ok && failed[e.file] {
			out[k] = e // keep the last good version
		}
	}
	return out
}

// gone calls del for each object fed last that next does not hold.
func (last fedSet[T]) gone(next fedSet[T], del func(objectName)) {
	for k := range last {
		if _, ok := next[k]; !ok {
			del(k)
		}
	}
}

// fresh records obj as fed under k in next and reports whether it differs from the object fed
// last (last).
func (last fedSet[T]) fresh(next fedSet[T], k objectName, obj T) bool {
	e := next[k]
	e.obj = obj
	next[k] = e
	return last[k].obj != obj
}

// NewFeeder returns a Feeder for t that has fed nothing yet.
func NewFeeder(t *model.Tracker) *Feeder {
	return &Feeder{tracker: t}
}

// KeepNode makes the Feeder keep the Node named name once fed, when it disappears from the
// loads: it is this node, and without it no node port is served. Manifest mode has no other
// way to take a node's node ports away than to delete its Node by mistake (a file moved away,
// a Node left out of a regenerated file), so its loss is reported (the Pipeline's warning and
// metric), not obeyed.
func (f *Feeder) KeepNode(name string) { f.keepNode = name }

// Feed applies objs, loaded with errs, to the Tracker. A load whose directory could not be read
// (DirectoryError) changes nothing: the Tracker keeps what it was last fed.
func (f *Feeder) Feed(objs Objects, errs []FileError) {
	if DirectoryError(errs) != nil {
		return
	}
	failed := map[string]bool{}
	for _, e := range errs {
		failed[e.File] = true
	}
	services := f.services.next(objs.From, "Service", failed)
	slices := f.slices.next(objs.From, "EndpointSlice", failed)
	nodes := f.nodes.next(objs.From, "Node", failed)
	if k := (objectName{"", f.keepNode}); f.keepNode != "" {
		if e, fed := f.nodes[k]; fed {
			if _, ok := nodes[k]; !ok {
				nodes[k] = e
			}
		}
	}
	// Deletions first: an object that moved between files is in both sets and stays.
	f.services.gone(services, func(k objectName) {
		f.tracker.DeleteService(model.ServiceKey{Namespace: k.namespace, Name: k.name})
	})
	f.slices.gone(slices, func(k objectName) { f.tracker.DeleteEndpointSlice(k.namespace, k.name) })
	f.nodes.gone(nodes, func(k objectName) { f.tracker.DeleteNode(k.name) })
	for _, n := range objs.Nodes {
		if f.nodes.fresh(nodes, objectName{"", n.Name}, n) {
			f.tracker.UpsertNode(n)
		}
	}
	for _, s := range objs.EndpointSlices {
		if f.slices.fresh(slices, objectName{s.Namespace, s.Name}, s) {
			f.tracker.UpsertParsedEndpointSlice(s)
		}
	}
	for _, s := range objs.Services {
		if f.services.fresh(services, objectName{s.Namespace, s.Name}, s) {
			f.tracker.UpsertService(s)
		}
	}
	for _, r := range objs.Refused {
		f.tracker.RejectService(r.Service, r.Rejection)
	}
	f.services, f.slices, f.nodes = services, slices, nodes
}
