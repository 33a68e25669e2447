package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// lastGood keeps a copy of each manifest file as it was when it last loaded without error, so
// that a file that cannot be read or decoded when the daemon starts (a half-written file, a
// typo saved just before a reboot, a permission gone wrong) still brings the Services it
// served before instead of none: a restart must not turn a bad file into deleted Services.
//
// A copy is the very bytes that were decoded (teed while the file was read), written to a
// temporary file that is synced and then renamed over the copy, so a crash leaves the old copy
// or the new one, never a torn one. A copy is removed when its file is seen to be gone.
// Copies live in their own directory (Loader.LastGoodDir), one per manifest file, by name.
type lastGood struct{ dir string }

// lastGoodTemp is the prefix of copies being written; they are never read as copies.
const lastGoodTemp = ".tmp-"

func (g lastGood) enabled() bool { return g.dir != "" }

func (g lastGood) path(name string) string { return filepath.Join(g.dir, name) }

// begin returns the temporary file to write name's new copy into while name is read, or nil
// when no copy is kept or the copy is already of this version of the file (same size and
// modification time, which commit sets from the file): a restart does not rewrite every copy.
func (g lastGood) begin(name string, st os.FileInfo) (*os.File, error) {
	if !g.enabled() {
		return nil, nil
	}
	if cst, err := os.Stat(g.path(name)); err == nil && st != nil && cst.Size() == st.Size() && cst.ModTime().Equal(st.ModTime()) {
		return nil, nil
	}
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return nil, fmt.Errorf("keep the last good copy of %s: %w", name, err)
	}
	f, err := os.CreateTemp(g.dir, lastGoodTemp+name+"-*")
	if err != nil {
		return nil, fmt.Errorf("keep the last good copy of %s: %w", name, err)
	}
	return f, nil
}

// commit makes tmp, which holds exactly the bytes of name that decoded, name's copy.
func (g lastGood) commit(tmp *os.File, name string, st os.FileInfo) error {
	err := tmp.Sync()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil && st != nil {
		err = os.Chtimes(tmp.Name(), st.ModTime(), st.ModTime())
	}
	if err == nil {
		err = os.Rename(tmp.Name(), g.path(name))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("keep the last good copy of %s in %s: %w", name, g.dir, err)
	}
	if d, err := os.Open(g.dir); err == nil { // the rename itself survives a crash
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// abort drops a copy being written (the file did not decode, or no copy is wanted).
func (g lastGood) abort(tmp *os.File) {
	if tmp != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
	}
}

// remove drops name's copy: the file is gone, so a file of that name written later starts
// without a last good state.
func (g lastGood) remove(name string) error {
	if !g.enabled() {
		return nil
	}
	if err := os.Remove(g.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the last good copy of %s: %w", name, err)
	}
	return nil
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
