package manifest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// lastGood keeps a copy of each manifest file as it was when it last loaded without error, so
// that a file that cannot be read or decoded when the daemon starts (a half-written file, a
// typo saved just before a reboot, a permission gone wrong) still brings the Services it
// served before instead of none: a restart must not turn a bad file into deleted Services.
//
// A copy is the very bytes that were decoded (kept while the file was read). Copies are
// written in batches: each to a temporary file, then all made durable at once (one syncfs)
// and renamed over the old copies, so a crash leaves the old copy or the new one, never a torn
// one. A copy is removed when its file is seen to be gone. Copies live in their own directory
// (Loader.LastGoodDir), one per manifest file, by name.
//
// Creating and syncing files is slow next to decoding a small one, so the Watcher writes copies
// from a goroutine of its own (copier), off the path from a change to its rules (compare
// BenchmarkReloadChurn's named and named+copies).
type lastGood struct{ dir string }

// lastGoodTemp is the prefix of copies being written; they are never read as copies.
const lastGoodTemp = ".tmp-"

// copyJob is one change to the copies: name's new copy (data, or already written to the
// temporary file tmp; with the file's modification time), or its removal.
type copyJob struct {
	name   string
	data   []byte
	tmp    string
	mtime  time.Time
	remove bool
}

// maxMemoryCopy is the largest file whose copy is kept in memory until it is written; a larger
// one is written to its temporary file while it is read, so a large file does not hold its
// size in memory, and a small one does not cost a file creation in the reload.
const maxMemoryCopy = 1 << 20

// create returns a new temporary file for name's copy.
func (g lastGood) create(name string) (*os.File, error) {
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return nil, fmt.Errorf("keep the last good copy of %s: %w", name, err)
	}
	f, err := os.CreateTemp(g.dir, lastGoodTemp+name+"-*")
	if err != nil {
		return nil, fmt.Errorf("keep the last good copy of %s: %w", name, err)
	}
	return f, nil
}

// drop removes the temporary file of a job that will not be written.
func (j copyJob) drop() {
	if j.tmp != "" {
		_ = os.Remove(j.tmp)
	}
}

func (g lastGood) enabled() bool { return g.dir != "" }

func (g lastGood) path(name string) string { return filepath.Join(g.dir, name) }

// current: name's copy is already of this version of the file (same size and modification
// time, which write sets from the file), so a restart does not copy every file again.
func (g lastGood) current(name string, st os.FileInfo) bool {
	if !g.enabled() || st == nil {
		return false
	}
	cst, err := os.Stat(g.path(name))
	return err == nil && cst.Size() == st.Size() && cst.ModTime().Equal(st.ModTime())
}

// write applies jobs (at most one per name): new copies to temporary files, one syncfs, then
// the renames and removals, and a sync of the directory. A job that fails is reported and
// leaves that file's copy as it was.
func (g lastGood) write(jobs []copyJob) error {
	if len(jobs) == 0 {
		return nil
	}
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return fmt.Errorf("keep the last good copies in %s: %w", g.dir, err)
	}
	var errs []error
	type written struct {
		tmp string
		job copyJob
	}
	var done []written
	for _, j := range jobs {
		if j.remove {
			continue
		}
		if j.tmp != "" {
			done = append(done, written{j.tmp, j})
			continue
		}
		f, err := os.CreateTemp(g.dir, lastGoodTemp+j.name+"-*")
		if err == nil {
			_, err = f.Write(j.data)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = os.Remove(f.Name())
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("keep the last good copy of %s in %s: %w", j.name, g.dir, err))
			continue
		}
		done = append(done, written{f.Name(), j})
	}
	d, err := os.Open(g.dir)
	if err == nil {
		defer d.Close()
		if len(done) > 0 {
			err = unix.Syncfs(int(d.Fd()))
		}
	}
	if err != nil {
		for _, w := range done {
			_ = os.Remove(w.tmp)
		}
		return errors.Join(append(errs, fmt.Errorf("keep the last good copies in %s: sync: %w", g.dir, err))...)
	}
	for _, w := range done {
		err := os.Chtimes(w.tmp, w.job.mtime, w.job.mtime)
		if err == nil {
			err = os.Rename(w.tmp, g.path(w.job.name))
		}
		if err != nil {
			_ = os.Remove(w.tmp)
			errs = append(errs, fmt.Errorf("keep the last good copy of %s in %s: %w", w.job.name, g.dir, err))
		}
	}
	for _, j := range jobs {
		if j.remove {
			if err := os.Remove(g.path(j.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove the last good copy of %s: %w", j.name, err))
			}
		}
	}
	_ = d.Sync() // the renames and removals themselves survive a crash
	return errors.Join(errs...)
}

// prune removes the copies (and temporary files left by a crash) of files that are not in
// present: the first full load of a directory tells which files exist.
func (g lastGood) prune(present map[string]bool) error {
	if !g.enabled() {
		return nil
	}
	entries, err := os.ReadDir(g.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list the last good copies in %s: %w", g.dir, err)
	}
	var errs []error
	for _, e := range entries {
		if !present[e.Name()] {
			if err := os.Remove(g.path(e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// copier writes the copies of the loads handed to it from its own goroutine, the latest job
// of each file only. Safe for concurrent use.
type copier struct {
	g       lastGood
	log     logr.Logger
	mu      sync.Mutex
	jobs    map[string]copyJob // not yet written, by file
	writing map[string]copyJob // being written by flush
	wake    chan struct{}
}

func newCopier(g lastGood, log logr.Logger) *copier {
	return &copier{g: g, log: log, jobs: map[string]copyJob{}, wake: make(chan struct{}, 1)}
}

// add queues jobs, each replacing an older job of its file.
func (c *copier) add(jobs []copyJob) {
	if len(jobs) == 0 {
		return
	}
	c.mu.Lock()
	for _, j := range jobs {
		if old, ok := c.jobs[j.name]; ok {
			old.drop() // superseded before it was written
		}
		c.jobs[j.name] = j
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// queued returns the job for name not yet written, if any: what its copy is about to be.
func (c *copier) queued(name string) (copyJob, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j, ok := c.jobs[name]; ok {
		return j, true
	}
	j, ok := c.writing[name]
	return j, ok
}

// flush writes the queued jobs. While they are written they are still answered by queued,
// and jobs queued meanwhile wait for the next flush.
func (c *copier) flush() {
	c.mu.Lock()
	c.writing, c.jobs = c.jobs, map[string]copyJob{}
	jobs := make([]copyJob, 0, len(c.writing))
	for _, j := range c.writing {
		jobs = append(jobs, j)
	}
	c.mu.Unlock()
	if len(jobs) > 0 {
		if err := c.g.write(jobs); err != nil {
			c.log.Error(err, "Last good copy of a manifest file not kept: if the file cannot be read at the next start, its Services are not served until it is fixed")
		}
	}
	c.mu.Lock()
	c.writing = nil
	c.mu.Unlock()
}

// run writes the jobs as they come until ctx ends, then writes those left (a daemon stopped
// right after a change keeps its copy).
func (c *copier) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			c.flush()
			return
		case <-c.wake:
			c.flush()
		}
	}
}
