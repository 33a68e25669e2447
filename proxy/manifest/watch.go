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
	// clock is what Run reads the time from and waits on (nil: the real one); tests drive a
	// fake one. The file cache's settling of file times (fileCache) stays on the real clock:
	// it compares with the times the file system stamps.
	clock clock

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
	r := newWatchRun(w, fw)
	defer r.stop()
	if g := (lastGood{dir: w.Loader.LastGoodDir}); g.enabled() {
		r.cache.copier = newCopier(g, w.Loader.Log)
		cctx, stop := context.WithCancel(context.Background())
		copied := make(chan struct{})
		go func() { r.cache.copier.run(cctx); close(copied) }()
		defer func() { stop(); <-copied }() // the copies of the last loads are written
	}
	r.reload(0)
	return r.loop(ctx)
}

// watchRun is the state of one Watcher.Run, owned by Run's goroutine.
type watchRun struct {
	w     *Watcher
	clock clock
	fw    *fsnotify.Watcher
	dir   string
	cache *fileCache // what the last load got from each file

	watching bool  // the inotify watch on dir is set up
	failing  error // the directory error of the last load, nil once it could be read
	// unhealthy is what OnFailure was told last (a directory or file failure).
	unhealthy bool
	// poll looks for the directory again while it cannot be read or watched, and retries the
	// unreadable files; timer is the debounce, and the settling of files written in place.
	poll, timer timer
	lastCost    time.Duration // what the last reload took, load and OnLoad
	burstStart  time.Time     // first event not yet reloaded; zero when none waits
	// changed holds the files named by events since the last reload; full is set when a
	// reload must list the directory again (see fileCache): at the start, after the directory
	// itself changed or could not be read, after a watch error (an inotify queue overflow loses
	// names), on a ConfigMap's "..data" swap (its files are symlinks that do not change
	// themselves), and while polling.
	changed map[string]bool
	full    bool
	// writes holds the files written in place since they were last loaded (see SettleInterval).
	writes map[string]writeStreak
	// retry names the files that could not be read at the last load, read again at each poll.
	retry []string
}

func newWatchRun(w *Watcher, fw *fsnotify.Watcher) *watchRun {
	c := w.clock
	if c == nil {
		c = realClock{}
	}
	r := &watchRun{w: w, clock: c, fw: fw, dir: filepath.Clean(w.Dir), cache: newFileCache(),
		changed: map[string]bool{}, full: true, writes: map[string]writeStreak{}}
	r.poll = c.NewTimer(PollInterval)
	r.poll.Stop()
	r.timer = c.NewTimer(DebounceInterval)
	r.timer.Stop()
	return r
}

// stop stops the timers.
func (r *watchRun) stop() {
	r.timer.Stop()
	r.poll.Stop()
}

// loop handles events and timers until ctx is cancelled or the watch ends.
func (r *watchRun) loop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-r.fw.Events:
			if !ok {
				return fmt.Errorf("watch manifest directory %s: event channel closed", r.dir)
			}
			if r.event(ev) {
				r.arm()
			}
		case err, ok := <-r.fw.Errors:
			if !ok {
				return fmt.Errorf("watch manifest directory %s: error channel closed", r.dir)
			}
			r.w.Log.Error(err, "Manifest directory watch error; reloading the whole directory", "dir", r.dir)
			r.full = true
			r.arm()
		case <-r.timer.C():
			var waited time.Duration // zero when only files settling waited
			if !r.burstStart.IsZero() {
				waited = r.clock.Now().Sub(r.burstStart)
			}
			r.burstStart = time.Time{}
			r.reload(waited)
		case <-r.poll.C():
			if r.failing != nil || !r.watching {
				r.full = true
			}
			for _, name := range r.retry {
				r.changed[name] = true
			}
			r.reload(0)
		}
	}
}

// event records what ev changed and reports whether it calls for a reload (a bare chmod and a
// file that is not a manifest do not).
func (r *watchRun) event(ev fsnotify.Event) bool {
	if ev.Op == fsnotify.Chmod {
		return false
	}
	name := filepath.Clean(ev.Name)
	base := filepath.Base(name)
	switch {
	case name == r.dir:
		r.full = true
		if ev.Op&(fsnotify.Remove|fsnotify.Rename) != 0 {
			// The directory itself was moved or deleted: the watch follows the old
			// inode, so drop it; the reload sets one up on whatever is at the path then.
			_ = r.fw.Remove(r.dir)
			r.watching = false
		}
	case filepath.Dir(name) != r.dir || strings.HasPrefix(base, ".."):
		r.full = true // a ConfigMap's ..data swap, or a name this watch cannot place
	case isManifestName(base):
		r.changed[base] = true
		if ev.Op&(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) != 0 {
			delete(r.writes, base) // a new file (renamed in, or to be written) or none
		}
		if ev.Op&fsnotify.Write != 0 {
			ws := r.writes[base]
			if ws.first.IsZero() {
				ws.first = r.clock.Now()
			}
			ws.last = r.clock.Now()
			r.writes[base] = ws
		}
	default:
		return false // not a manifest file (an editor's or a writer's temporary file)
	}
	return true
}

// arm (re)starts the debounce for an event: DebounceInterval after it, or sooner when the
// burst it belongs to has waited for its reload cap.
func (r *watchRun) arm() {
	now := r.clock.Now()
	if r.burstStart.IsZero() {
		r.burstStart = now
	}
	wait := DebounceInterval
	if left := reloadCap(r.lastCost) - now.Sub(r.burstStart); left < wait {
		wait = max(left, 0)
	}
	r.timer.Reset(wait)
}

// health tells OnFailure when the source becomes unhealthy (err) or healthy again (nil), once
// per change.
func (r *watchRun) health(err error) {
	w := r.w
	switch {
	case err != nil && !r.unhealthy:
		r.unhealthy = true
		w.failingSince.Store(r.clock.Now().UnixNano())
		if w.OnFailure != nil {
			w.OnFailure(err)
		}
	case err == nil && r.unhealthy:
		r.unhealthy = false
		w.failingSince.Store(0)
		if w.OnFailure != nil {
			w.OnFailure(nil)
		}
	}
}

// reload loads the directory; waited is how long its first change waited for it (the
// debounce and the reload cap), logged with what the reload itself took. Files still being
// written are left as they are and reloaded once settled, by timer.
func (r *watchRun) reload(waited time.Duration) {
	start := r.clock.Now()
	defer func() { r.lastCost = r.clock.Now().Sub(start) }()
	hold, settleWait := r.w.settling(r.writes, start)
	r.cache.hold = hold
	for name := range hold {
		delete(r.changed, name)
	}
	defer func() {
		r.cache.hold = nil
		for name := range hold {
			r.changed[name] = true
		}
		if len(hold) > 0 {
			r.timer.Reset(settleWait)
		}
	}()
	if !r.full && r.watching && r.failing == nil && len(r.changed) == 0 {
		return // only files still being written
	}
	if !r.watching { // before loading, so an edit made meanwhile is not missed
		if err := r.fw.Add(r.dir); err == nil {
			r.watching = true
		}
	}
	kind, objs, errs := r.load()
	if r.dirFailed(errs) {
		return
	}
	r.fileFailures(errs)
	r.w.Log.V(1).Info("Loaded manifests", "dir", r.dir, "reload", kind, "decodedFiles", r.cache.decoded, "services", len(objs.Services), "refused", len(objs.Refused),
		"endpointSlices", len(objs.EndpointSlices), "nodes", len(objs.Nodes), "errors", len(errs), "waited", waited, "took", r.clock.Now().Sub(start))
	r.w.OnLoad(objs, errs)
}

// load loads the whole directory, or only the files named since the last load when the
// directory is watched and nothing calls for a full load; it reports which it did.
func (r *watchRun) load() (string, Objects, []FileError) {
	var objs Objects
	var errs []FileError
	kind := "named files"
	if r.full || !r.watching || r.failing != nil {
		kind = "full"
		objs, errs = r.w.Loader.load(r.dir, r.cache)
	} else {
		objs, errs = r.w.Loader.loadChanged(r.dir, r.cache, r.changed)
	}
	r.full, r.changed = DirectoryError(errs) != nil, map[string]bool{}
	return kind, objs, errs
}

// dirFailed handles the directory's state after a load: while it cannot be read (reported
// true) the watch is dropped, the failure logged once and the directory polled for; when it
// can, it is polled for changes if it cannot be watched, and its return is logged.
func (r *watchRun) dirFailed(errs []FileError) bool {
	if derr := DirectoryError(errs); derr != nil {
		if r.watching {
			_ = r.fw.Remove(r.dir)
			r.watching = false
		}
		if r.failing == nil {
			r.w.Log.Error(derr, "Manifest directory cannot be read; the Services loaded last stay as they are until it is back", "dir", r.dir, "retryEvery", PollInterval)
		}
		r.health(derr)
		r.failing = derr
		r.poll.Reset(PollInterval)
		return true
	}
	if !r.watching {
		r.w.Log.Info("Manifest directory can be read but not watched; looking for changes by polling", "dir", r.dir, "every", PollInterval)
		r.poll.Reset(PollInterval)
	}
	if r.failing != nil {
		r.failing = nil
		r.w.Log.Info("Manifest directory is back; reloading it", "dir", r.dir)
	}
	return false
}

// fileFailures reports the files of a load that cannot be used (health) and schedules the
// unreadable ones to be read again at the next poll.
func (r *watchRun) fileFailures(errs []FileError) {
	bad := BadFiles(errs)
	r.retry = r.retry[:0]
	for _, e := range bad {
		if e.Unreadable {
			r.retry = append(r.retry, e.File)
		}
	}
	if len(r.retry) > 0 {
		r.poll.Reset(PollInterval)
	}
	if len(bad) > 0 {
		r.health(badFilesError(bad))
	} else {
		r.health(nil)
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
