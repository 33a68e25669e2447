package manifest

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// renameFile writes name in dir the way editors and config tools do: a dot-file renamed over it.
func renameFile(t *testing.T, dir, name, content string) {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
}

// symlinkLoop replaces name in dir by a symlink to itself: stat fails with ELOOP, an error
// other than "not found" that a test running as root can make (permissions do not stop root).
func symlinkLoop(t *testing.T, dir, name string) {
	t.Helper()
	tmp := filepath.Join(dir, ".tmp-loop")
	if err := os.Symlink(name, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, syscall.ELOOP) {
		t.Fatalf("stat of the symlink loop: %v; want ELOOP", err)
	}
}

// failOn returns a stat (or open) that fails with errno for the file named name while on is set.
func failingStat(name string, on *atomic.Bool, errno syscall.Errno) func(string) (os.FileInfo, error) {
	return func(p string) (os.FileInfo, error) {
		if on.Load() && filepath.Base(p) == name {
			return nil, &fs.PathError{Op: "stat", Path: p, Err: errno}
		}
		return os.Stat(p)
	}
}

func failingOpen(name string, on *atomic.Bool, errno syscall.Errno) func(string) (io.ReadCloser, error) {
	return func(p string) (io.ReadCloser, error) {
		if on.Load() && filepath.Base(p) == name {
			return nil, &fs.PathError{Op: "open", Path: p, Err: errno}
		}
		return os.Open(p)
	}
}

const typoYAML = "apiVersion: v1\nkind: Service\nmetadata: {name: b}\nspec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80, targetport: 8080}]}\n"

// A restart is a Loader that has never seen the directory: a file that cannot be used then
// brings the objects of its last good copy, whatever the reason it cannot be used, and says so.
func TestLastGoodCopyAtStart(t *testing.T) {
	both := []string{"a.yaml: Service default/a", "b.yaml: Service default/b"}
	cases := []struct {
		name  string
		spoil func(t *testing.T, dir string, l *Loader)
	}{
		{"does not decode", func(t *testing.T, dir string, _ *Loader) { renameFile(t, dir, "b.yaml", typoYAML) }},
		{"written half", func(t *testing.T, dir string, _ *Loader) {
			writeFiles(t, dir, map[string]string{"b.yaml": svcYAML("b")[:40]})
		}},
		{"stat fails", func(t *testing.T, dir string, l *Loader) {
			on := &atomic.Bool{}
			on.Store(true)
			l.stat = failingStat("b.yaml", on, syscall.EACCES)
		}},
		{"symlink loop", func(t *testing.T, dir string, _ *Loader) { symlinkLoop(t, dir, "b.yaml") }},
		{"open fails", func(t *testing.T, dir string, l *Loader) {
			on := &atomic.Bool{}
			on.Store(true)
			l.open = failingOpen("b.yaml", on, syscall.EIO)
		}},
		{"too large", func(t *testing.T, dir string, l *Loader) {
			l.MaxFileBytes = int64(len(svcYAML("b")) + 10)
			renameFile(t, dir, "b.yaml", svcYAML("b")+"# "+strings.Repeat("x", 100)+"\n")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, copies := t.TempDir(), filepath.Join(t.TempDir(), "last-good")
			writeFiles(t, dir, map[string]string{"a.yaml": svcYAML("a"), "b.yaml": svcYAML("b")})
			if objs, errs := (Loader{LastGoodDir: copies}).Load(dir); len(errs) != 0 || !reflect.DeepEqual(refs(objs), both) {
				t.Fatalf("first run: %v, errors %v; want %v", refs(objs), errs, both)
			}
			if got, err := os.ReadFile(filepath.Join(copies, "b.yaml")); err != nil || string(got) != svcYAML("b") {
				t.Fatalf("copy of b.yaml = %q, %v; want the file's content", got, err)
			}

			var used []string
			l := Loader{LastGoodDir: copies, OnLastGood: func(f string) { used = append(used, f) }}
			c.spoil(t, dir, &l)
			objs, errs := l.Load(dir)
			if !reflect.DeepEqual(refs(objs), both) {
				t.Errorf("restart with b.yaml broken: loaded %v; want %v (b from its last good copy)", refs(objs), both)
			}
			bad := BadFiles(errs)
			if len(bad) != 1 || bad[0].File != "b.yaml" || !bad[0].LastGood {
				t.Errorf("restart: bad files %+v; want b.yaml, served from its last good copy", bad)
			}
			if !slices.Equal(used, []string{"b.yaml"}) {
				t.Errorf("OnLastGood called for %v; want [b.yaml]", used)
			}
			if got, err := os.ReadFile(filepath.Join(copies, "b.yaml")); err != nil || string(got) != svcYAML("b") {
				t.Errorf("copy of b.yaml after the failed load = %q, %v; want the last good content kept", got, err)
			}
			// Without copies the file brings nothing: the behaviour run documents without
			// --state-dir.
			l.LastGoodDir = ""
			if objs, _ := l.Load(dir); !reflect.DeepEqual(refs(objs), both[:1]) {
				t.Errorf("without copies: loaded %v; want only a", refs(objs))
			}
		})
	}
}

// A copy is what decoded, kept until its file is seen to be gone: a file deleted and written
// again broken starts without a last good state.
func TestLastGoodCopyRemovedWithItsFile(t *testing.T) {
	dir, copies := t.TempDir(), filepath.Join(t.TempDir(), "last-good")
	writeFiles(t, dir, map[string]string{"a.yaml": svcYAML("a"), "b.yaml": svcYAML("b")})
	l := Loader{LastGoodDir: copies}
	l.Load(dir)
	if err := os.Remove(filepath.Join(dir, "b.yaml")); err != nil {
		t.Fatal(err)
	}
	l.Load(dir) // a restart sees b.yaml gone
	if _, err := os.Stat(filepath.Join(copies, "b.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("copy of deleted b.yaml: %v; want it removed", err)
	}
	renameFile(t, dir, "b.yaml", typoYAML)
	if objs, _ := l.Load(dir); !reflect.DeepEqual(refs(objs), []string{"a.yaml: Service default/a"}) {
		t.Fatalf("b.yaml written again broken: loaded %v; want only a", refs(objs))
	}
	if ents, _ := os.ReadDir(copies); len(ents) != 1 || ents[0].Name() != "a.yaml" {
		t.Fatalf("copies %v; want only a.yaml (no temporary files left)", ents)
	}
}

// waitLoad waits (bounded) for a load equal to want, returning the loads seen on the way.
func (r *watchRecorder) waitLoad(t *testing.T, what string, want []string) [][]string {
	t.Helper()
	var seen [][]string
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l := <-r.loads:
			seen = append(seen, l)
			if reflect.DeepEqual(l, want) {
				return seen
			}
		case <-deadline:
			t.Fatalf("no load of %v after %s within 20s; loads seen: %v", want, what, seen)
		}
	}
}

// A file whose stat fails (here: a symlink loop, ELOOP) is not a deleted file: its objects stay,
// the source reports the failure, and once the file is usable again it is loaded.
func TestWatcherStatErrorIsNotDeletion(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.yaml": svcYAML("a"), "b.yaml": svcYAML("b")})
	r := startWatcher(t, dir)
	both := []string{"a.yaml: Service default/a", "b.yaml: Service default/b"}
	if got := r.nextLoad(t, "start"); !reflect.DeepEqual(got, both) {
		t.Fatalf("first load %v; want %v", got, both)
	}
	symlinkLoop(t, dir, "b.yaml")
	if got := r.nextLoad(t, "b.yaml became a symlink loop"); !reflect.DeepEqual(got, both) {
		t.Fatalf("load with b.yaml unreadable: %v; want %v (b kept)", got, both)
	}
	r.waitFailing(t)
	renameFile(t, dir, "b.yaml", svcYAML("b2"))
	r.waitLoad(t, "b.yaml fixed", []string{"a.yaml: Service default/a", "b.yaml: Service default/b2"})
	if !r.w.FailingSince().IsZero() {
		t.Errorf("FailingSince %v after b.yaml was fixed; want zero", r.w.FailingSince())
	}
	if got := r.failureLog(); !reflect.DeepEqual(got, []string{"failing", "back"}) {
		t.Errorf("failure reports %v; want failing, back", got)
	}
}

// A stat or read error that clears without any event on the file (the directory's or the file's
// permission given back: a chmod, which inotify reports as a bare attribute change) is seen by
// the retry: the changes made meanwhile are loaded. Until then the file keeps its objects.
func TestWatcherRetriesUnreadableFiles(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(l *Loader, on *atomic.Bool)
	}{
		{"stat", func(l *Loader, on *atomic.Bool) { l.stat = failingStat("b.yaml", on, syscall.EACCES) }},
		{"open", func(l *Loader, on *atomic.Bool) { l.open = failingOpen("b.yaml", on, syscall.EACCES) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"a.yaml": svcYAML("a"), "b.yaml": svcYAML("b")})
			failing := &atomic.Bool{}
			r := startWatcherWith(t, dir, func(w *Watcher) { c.set(&w.Loader, failing) })
			both := []string{"a.yaml: Service default/a", "b.yaml: Service default/b"}
			if got := r.nextLoad(t, "start"); !reflect.DeepEqual(got, both) {
				t.Fatalf("first load %v; want %v", got, both)
			}
			failing.Store(true)
			renameFile(t, dir, "b.yaml", svcYAML("b2")) // changed while it cannot be read
			if got := r.nextLoad(t, "b.yaml changed while unreadable"); !reflect.DeepEqual(got, both) {
				t.Fatalf("load with b.yaml unreadable: %v; want %v (b kept)", got, both)
			}
			r.waitFailing(t)
			failing.Store(false) // no event
			r.waitLoad(t, "b.yaml readable again", []string{"a.yaml: Service default/a", "b.yaml: Service default/b2"})
			if got := r.failureLog(); !reflect.DeepEqual(got, []string{"failing", "back"}) {
				t.Errorf("failure reports %v; want failing, back", got)
			}
		})
	}
}

// A file written in place (truncated, then written in pieces with pauses longer than the
// debounce, as `cp` of a large file or a script's `>` and `>>` do) is loaded once, whole: no
// load sees it empty or with only its first documents. The Watcher runs on a fake clock: each
// pause is the clock moved on once the Watcher took the write in, so the debounce fires between
// the pieces however slow the machine is.
func TestWatchWaitsForFilesWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"svc.yaml": svcYAML("a") + "---\n" + svcYAML("b")})
	clk := newFakeClock()
	r := startWatcherWith(t, dir, func(w *Watcher) { w.Settle, w.MaxSettle, w.clock = 3*time.Second, time.Minute, clk })
	old := []string{"svc.yaml: Service default/a", "svc.yaml: Service default/b"}
	if got := r.nextLoad(t, "start"); !reflect.DeepEqual(got, old) {
		t.Fatalf("first load %v; want %v", got, old)
	}
	clk.drainArmed()
	f, err := os.OpenFile(filepath.Join(dir, "svc.yaml"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	pause := 3 * DebounceInterval
	clk.waitArmed(t, "the truncation")
	clk.Advance(pause)
	for _, chunk := range []string{svcYAML("a"), "---\n", svcYAML("c")[:30], svcYAML("c")[30:]} {
		clk.drainArmed()
		if _, err := f.WriteString(chunk); err != nil {
			t.Fatal(err)
		}
		clk.waitArmed(t, "a write")
		clk.Advance(pause)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	final := []string{"svc.yaml: Service default/a", "svc.yaml: Service default/c"}
	seen := r.waitLoadAdvancing(t, clk, "the rewrite", final)
	if len(seen) != 1 {
		t.Errorf("loads during the rewrite %v; want only the finished file %v", seen, final)
	}
}

// waitLoadAdvancing is waitLoad on a Watcher with a fake clock: the clock is moved on a
// debounce interval whenever no load came for a moment, so every timer of the Watcher fires.
func (r *watchRecorder) waitLoadAdvancing(t *testing.T, clk *fakeClock, what string, want []string) [][]string {
	t.Helper()
	var seen [][]string
	for i := 0; i < 2000; i++ {
		select {
		case l := <-r.loads:
			seen = append(seen, l)
			if reflect.DeepEqual(l, want) {
				return seen
			}
		case <-time.After(10 * time.Millisecond):
			clk.Advance(DebounceInterval)
		}
	}
	t.Fatalf("no load of %v after %s; loads seen: %v", want, what, seen)
	return nil
}

// A ConfigMap volume as the kubelet writes it: each key a symlink through "..data" into a
// timestamped directory; an update writes a new timestamped directory, points "..data_tmp" at
// it, renames it over "..data" and removes the old directory. The update is loaded, and no
// load sees the Services missing.
func TestWatchConfigMapUpdate(t *testing.T) {
	dir := t.TempDir()
	version := func(name string, files map[string]string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, filepath.Join(dir, name), files)
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for key := range files {
			if err := os.Symlink(filepath.Join("..data", key), filepath.Join(dir, key)); err != nil && !errors.Is(err, fs.ErrExist) {
				t.Fatal(err)
			}
		}
	}
	version("..2026_12_06_04_00_00.000000001", map[string]string{"a.yaml": svcYAML("a"), "b.yaml": svcYAML("b")})
	r := startWatcher(t, dir)
	old := []string{"a.yaml: Service default/a", "b.yaml: Service default/b"}
	if got := r.nextLoad(t, "start"); !reflect.DeepEqual(got, old) {
		t.Fatalf("first load %v; want %v", got, old)
	}
	version("..2026_12_06_04_00_01.000000002", map[string]string{"a.yaml": svcYAML("a"), "b.yaml": svcYAML("b2")})
	if err := os.RemoveAll(filepath.Join(dir, "..2026_12_06_04_00_00.000000001")); err != nil {
		t.Fatal(err)
	}
	want := []string{"a.yaml: Service default/a", "b.yaml: Service default/b2"}
	for _, l := range r.waitLoad(t, "the ConfigMap update", want) {
		if !reflect.DeepEqual(l, old) && !reflect.DeepEqual(l, want) {
			t.Errorf("load during the ConfigMap update: %v; want %v or %v", l, old, want)
		}
	}
	if strings.Contains(r.failureLog2(), "failing") {
		t.Errorf("a ConfigMap update reported a failure: %v", r.failureLog())
	}
}

func (r *watchRecorder) failureLog2() string { return strings.Join(r.failureLog(), ",") }

// The Watcher keeps the copies as the files change (written beside the reloads, and those
// still queued when it stops), so the next start has the last good version of each file: a
// file changed, then broken while the daemon is down, comes back as changed; a file deleted
// meanwhile has no copy left.
func TestWatcherKeepsCopiesForTheNextStart(t *testing.T) {
	dir, copies := t.TempDir(), filepath.Join(t.TempDir(), "last-good")
	writeFiles(t, dir, map[string]string{"a.yaml": svcYAML("a"), "b.yaml": svcYAML("b"), "c.yaml": svcYAML("c")})
	r := startWatcherWith(t, dir, func(w *Watcher) { w.Loader.LastGoodDir = copies })
	r.nextLoad(t, "start")
	renameFile(t, dir, "b.yaml", svcYAML("b2"))
	if err := os.Remove(filepath.Join(dir, "c.yaml")); err != nil {
		t.Fatal(err)
	}
	r.waitLoad(t, "b.yaml changed, c.yaml removed", []string{"a.yaml: Service default/a", "b.yaml: Service default/b2"})
	r.cancel()
	err := <-r.done
	r.done <- err // for the cleanup
	if err != nil {
		t.Fatal(err)
	}

	renameFile(t, dir, "b.yaml", typoYAML)
	objs, errs := (Loader{LastGoodDir: copies}).Load(dir)
	if want := []string{"a.yaml: Service default/a", "b.yaml: Service default/b2"}; !reflect.DeepEqual(refs(objs), want) {
		t.Errorf("next start with b.yaml broken: %v (errors %v); want %v", refs(objs), errs, want)
	}
	if _, err := os.Stat(filepath.Join(copies, "c.yaml")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("copy of the removed c.yaml: %v; want none", err)
	}
}

// A file larger than maxMemoryCopy is copied through a temporary file written as it is read:
// the copy is the file, and nothing is left behind when it does not decode.
func TestLastGoodCopyOfALargeFile(t *testing.T) {
	dir, copies := t.TempDir(), filepath.Join(t.TempDir(), "last-good")
	big := svcYAML("big") + "# " + strings.Repeat("x", maxMemoryCopy) + "\n"
	writeFiles(t, dir, map[string]string{"big.yaml": big})
	if _, errs := (Loader{LastGoodDir: copies}).Load(dir); len(errs) != 0 {
		t.Fatal(errs)
	}
	if got, err := os.ReadFile(filepath.Join(copies, "big.yaml")); err != nil || string(got) != big {
		t.Fatalf("copy of big.yaml: %d bytes, %v; want the file's %d", len(got), err, len(big))
	}
	renameFile(t, dir, "big.yaml", big+"---\nkind: [\n")
	objs, _ := (Loader{LastGoodDir: copies}).Load(dir)
	if want := []string{"big.yaml: Service default/big"}; !reflect.DeepEqual(refs(objs), want) {
		t.Errorf("big.yaml broken at start: loaded %v; want %v from its copy", refs(objs), want)
	}
	if ents, _ := os.ReadDir(copies); len(ents) != 1 || ents[0].Name() != "big.yaml" {
		t.Errorf("copies %v; want only big.yaml (no temporary file of the broken version)", ents)
	}
	if got, _ := os.ReadFile(filepath.Join(copies, "big.yaml")); string(got) != big {
		t.Errorf("copy of big.yaml changed by the broken version (%d bytes)", len(got))
	}
}

// A file that does not decode makes the source unhealthy (source_up 0 in the daemon) while its
// objects stay, and healthy again once it is fixed; before, only a missing directory did, and
// a broken file was silent in the metrics.
func TestWatcherBadFileIsASourceFailure(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.yaml": svcYAML("a"), "b.yaml": svcYAML("b")})
	r := startWatcher(t, dir)
	both := []string{"a.yaml: Service default/a", "b.yaml: Service default/b"}
	r.nextLoad(t, "start")
	renameFile(t, dir, "b.yaml", typoYAML)
	if got := r.nextLoad(t, "b.yaml broken"); !reflect.DeepEqual(got, both) {
		t.Fatalf("load with b.yaml broken: %v; want %v (b kept)", got, both)
	}
	r.waitFailing(t)
	renameFile(t, dir, "b.yaml", svcYAML("b2"))
	r.waitLoad(t, "b.yaml fixed", []string{"a.yaml: Service default/a", "b.yaml: Service default/b2"})
	if got := r.failureLog(); !reflect.DeepEqual(got, []string{"failing", "back"}) || !r.w.FailingSince().IsZero() {
		t.Errorf("failure reports %v, FailingSince %v; want failing, back and zero", got, r.w.FailingSince())
	}
}
