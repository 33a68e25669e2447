package manifest

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// watchRecorder runs a Watcher and records what it reports.
type watchRecorder struct {
	w        *Watcher
	loads    chan []string
	mu       sync.Mutex
	failures []string // "failing: ..." or "back"
	done     chan error
	cancel   context.CancelFunc
}

func startWatcher(t *testing.T, dir string) *watchRecorder {
	t.Helper()
	return startWatcherWith(t, dir, func(*Watcher) {})
}

// startWatcherWith is startWatcher with the Watcher changed by edit before it runs.
func startWatcherWith(t *testing.T, dir string, edit func(*Watcher)) *watchRecorder {
	t.Helper()
	r := &watchRecorder{loads: make(chan []string, 100), done: make(chan error, 1)}
	r.w = &Watcher{Dir: dir, Log: logr.Discard(),
		OnLoad: func(o Objects, _ []FileError) { r.loads <- refs(o) },
		OnFailure: func(err error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if err == nil {
				r.failures = append(r.failures, "back")
			} else {
				r.failures = append(r.failures, "failing")
			}
		}}
	edit(r.w)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("Run returned %v; want nil after cancel", err)
		}
	})
	return r
}

// nextLoad waits for a load (bounded) and returns it.
func (r *watchRecorder) nextLoad(t *testing.T, what string) []string {
	t.Helper()
	select {
	case l := <-r.loads:
		return l
	case <-time.After(10 * time.Second):
		t.Fatalf("no load after %s within 10s", what)
		return nil
	}
}

// waitFailing waits (bounded) until FailingSince is set.
func (r *watchRecorder) waitFailing(t *testing.T) {
	t.Helper()
	for i := 0; i < 200 && r.w.FailingSince().IsZero(); i++ {
		time.Sleep(25 * time.Millisecond)
	}
	if r.w.FailingSince().IsZero() {
		t.Fatal("FailingSince still zero 5s after the directory went away")
	}
}

func (r *watchRecorder) failureLog() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.failures...)
}

// The daemon scenario at the watcher: the directory is moved away (nothing is reported
// as loaded, so nothing is deleted; the failure is reported once), a new directory appears at
// the path (loaded), and an edit in it is seen (the watch follows the new directory).
func TestWatcherDirectoryMovedAwayAndBack(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"svc.yaml": svcYAML("web")})
	r := startWatcher(t, dir)
	if got := r.nextLoad(t, "start"); !reflect.DeepEqual(got, []string{"svc.yaml: Service default/web"}) {
		t.Fatalf("first load = %v; want web", got)
	}

	if err := os.Rename(dir, filepath.Join(parent, "moved")); err != nil {
		t.Fatal(err)
	}
	r.waitFailing(t)
	// Edits in the moved directory must not be read as the manifests.
	writeFiles(t, filepath.Join(parent, "moved"), map[string]string{"other.yaml": svcYAML("other")})
	time.Sleep(3 * PollInterval)
	select {
	case l := <-r.loads:
		t.Fatalf("load %v while the directory is gone; want none (the last good state stays)", l)
	default:
	}
	if got := r.failureLog(); !reflect.DeepEqual(got, []string{"failing"}) {
		t.Fatalf("failure reports = %v; want one per streak", got)
	}

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"svc.yaml": svcYAML("api")})
	// The first load after the return may catch the directory still empty; wait for api.
	for got := r.nextLoad(t, "return"); !reflect.DeepEqual(got, []string{"svc.yaml: Service default/api"}); got = r.nextLoad(t, "return") {
		if len(got) != 0 {
			t.Fatalf("load after return = %v; want api", got)
		}
	}
	if !r.w.FailingSince().IsZero() {
		t.Fatalf("FailingSince = %v after the directory returned; want zero", r.w.FailingSince())
	}
	writeFiles(t, dir, map[string]string{"svc.yaml": svcYAML("edited")})
	for got := r.nextLoad(t, "edit after return"); !reflect.DeepEqual(got, []string{"svc.yaml: Service default/edited"}); got = r.nextLoad(t, "edit after return") {
	}
	if got := r.failureLog(); !reflect.DeepEqual(got, []string{"failing", "back"}) {
		t.Fatalf("failure reports = %v; want failing, back", got)
	}
	// The returned directory is watched again, not polled: without changes, no loads (after
	// the edit's burst has settled).
	time.Sleep(MaxReloadDelay + 2*DebounceInterval)
	for len(r.loads) > 0 {
		<-r.loads
	}
	time.Sleep(3 * PollInterval)
	if n := len(r.loads); n != 0 {
		t.Fatalf("%d loads without a change after the directory returned; want none (watched, not polled)", n)
	}
}

// Deleted outright (rm -r) and recreated: the same.
func TestWatcherDirectoryDeletedAndRecreated(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"svc.yaml": svcYAML("web")})
	r := startWatcher(t, dir)
	r.nextLoad(t, "start")
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	r.waitFailing(t)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"svc.yaml": svcYAML("again")})
	for got := r.nextLoad(t, "recreate"); !reflect.DeepEqual(got, []string{"svc.yaml: Service default/again"}); got = r.nextLoad(t, "recreate") {
	}
	writeFiles(t, dir, map[string]string{"svc.yaml": svcYAML("edited")})
	for got := r.nextLoad(t, "edit"); !reflect.DeepEqual(got, []string{"svc.yaml: Service default/edited"}); got = r.nextLoad(t, "edit") {
	}
}

// A directory missing at start is waited for, not an error, and nothing is loaded until then.
func TestWatcherDirectoryMissingAtStart(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	r := startWatcher(t, dir)
	r.waitFailing(t)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"svc.yaml": svcYAML("web")})
	for got := r.nextLoad(t, "appear"); !reflect.DeepEqual(got, []string{"svc.yaml: Service default/web"}); got = r.nextLoad(t, "appear") {
	}
}

// A failed directory read changes nothing in the Tracker; an empty directory is "no Services";
// deleting one file removes its objects.
func TestFeederDirectoryFailureKeepsState(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.yaml": svcYAML("a"), "b.yaml": strings.Replace(svcYAML("b"), "10.96.0.10", "10.96.0.11", 1)})
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	f := NewFeeder(tr)
	f.Feed(Load(dir))
	want := []string{"default/a", "default/b"}
	f.Feed(Load(filepath.Join(dir, "gone")))
	if got := serviceNames(tr); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a failed directory read: services = %v; want %v kept", got, want)
	}
	if err := removeFile(dir, "b.yaml"); err != nil {
		t.Fatal(err)
	}
	f.Feed(Load(dir))
	if got := serviceNames(tr); !reflect.DeepEqual(got, []string{"default/a"}) {
		t.Fatalf("after deleting b.yaml: services = %v; want [default/a]", got)
	}
	if err := removeFile(dir, "a.yaml"); err != nil {
		t.Fatal(err)
	}
	f.Feed(Load(dir))
	if got := serviceNames(tr); len(got) != 0 {
		t.Fatalf("empty directory: services = %v; want none", got)
	}
}
