package manifest

import (
	"os"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// settleTime is how long a file must have been left alone (its mtime and ctime that far in the
// past when a load starts) before a full load may reuse its decoded objects by its times alone:
// a file written within the timestamps' granularity of a read could change again without its
// times changing.
const settleTime = time.Second

// fileCache holds, across the Watcher's reloads, what the last load got from each file of the
// directory: its objects, or the error that kept them out. It serves two kinds of reload:
//
//   - A full reload (the first, and after the directory itself changed, an inotify overflow or
//     while polling) lists the directory and stats every file; a file is decoded again unless
//     it has settled and its inode, size, mtime and ctime are those it was decoded with (ctime
//     cannot be set back by a writer, a rename over it brings a new inode).
//   - A reload of named files (the Watcher's usual one) decodes only the files its inotify
//     events named and takes every other file as the last load left it, settled or not: a
//     write to one of them would have been named too. Its cost follows the change, not the
//     directory: at 10,000 files a full reload's listing and stats alone took 30 ms.
//
// Objects are handed out as they were decoded, the same objects at every reload until their file
// changes: nothing downstream writes to them (manifest mode's node-port assigner gives the model
// copies of the Services it assigns ports to), and the Feeder skips by identity what it fed
// last time.
type fileCache struct {
	now   func() time.Time
	files map[string]cachedFile
	// names are the files of files in name order: the order a load merges them in, so the
	// first of two definitions of an object wins whichever kind of reload ran.
	names []string
	// decoded counts the files decoded by the last load (the Watcher logs it).
	decoded int
	// hold names the files a full load leaves as they are (the Watcher's files still being
	// written in place); nil: none.
	hold map[string]bool
	// pruned is set once a full load has removed the last good copies of absent files.
	pruned bool
	// copies are the changes to the last good copies of the load in progress, written (or
	// handed to copier) at its end.
	copies []copyJob
	// copier, if set, writes the copies of the loads after the first (the Watcher's).
	copier *copier
}

// queued returns the copy of name the copier has not written yet, if any.
func (c *fileCache) queued(name string) (copyJob, bool) {
	for i := len(c.copies) - 1; i >= 0; i-- {
		if c.copies[i].name == name {
			return c.copies[i], true
		}
	}
	if c.copier != nil {
		return c.copier.queued(name)
	}
	return copyJob{}, false
}

type cachedFile struct {
	key     fileKey
	settled bool       // a full load may reuse objs by key alone
	objs    Objects    // as decoded (or last good, see err); never written to
	err     *FileError // why the file could not be used, nil when it loaded; objs are its last good objects if err.LastGood
}

type fileKey struct {
	ino                  uint64
	size                 int64
	mtimeNano, ctimeNano int64
}

func newFileCache() *fileCache {
	return &fileCache{now: time.Now, files: map[string]cachedFile{}}
}

// keyOf is st's identity, and false when the platform does not say (then nothing is reused
// by a full load).
func keyOf(st os.FileInfo) (fileKey, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{ino: sys.Ino, size: st.Size(), mtimeNano: st.ModTime().UnixNano(),
		ctimeNano: time.Unix(sys.Ctim.Unix()).UnixNano()}, true
}

// reusable: a full load may take name's objects without decoding it, st being the file now.
func (c *fileCache) reusable(name string, st os.FileInfo) bool {
	e, ok := c.files[name]
	k, known := keyOf(st)
	return ok && known && e.settled && e.err == nil && k == e.key
}

// record keeps what decoding name gave (objs, or ferr with its last good objects), st being the
// file as the load that started at start found it (nil: it could not be stat'ed), and adds
// name to names if it is new.
func (c *fileCache) record(name string, st os.FileInfo, objs Objects, ferr *FileError, start time.Time) {
	var k fileKey
	ok := false
	if st != nil {
		k, ok = keyOf(st)
	}
	settled := start.Add(-settleTime).UnixNano()
	c.files[name] = cachedFile{key: k, settled: ok && k.mtimeNano <= settled && k.ctimeNano <= settled, objs: objs, err: ferr}
	if i, found := slices.BinarySearch(c.names, name); !found {
		c.names = slices.Insert(c.names, i, name)
	}
}

// forget drops name (deleted, renamed away, no longer a regular file).
func (c *fileCache) forget(name string) {
	delete(c.files, name)
	if i, found := slices.BinarySearch(c.names, name); found {
		c.names = slices.Delete(c.names, i, i+1)
	}
}

// assemble merges every file's objects in name order into one load, with the failed files'
// errors (their last good objects, if any, merged as the file's) and the duplicates it finds.
// Its map and lists are made at their size: grown one object at a time, they were rehashed and
// copied ~20 times at 20,000 objects.
func (c *fileCache) assemble() (Objects, []FileError) {
	var svcs, eps, nodes, refused int
	for _, e := range c.files {
		svcs, eps, nodes, refused = svcs+len(e.objs.Services), eps+len(e.objs.EndpointSlices), nodes+len(e.objs.Nodes), refused+len(e.objs.Refused)
	}
	objs := Objects{
		Services:       make([]*corev1.Service, 0, svcs),
		EndpointSlices: make([]*model.EndpointSlice, 0, eps),
		Nodes:          make([]*corev1.Node, 0, nodes),
		From:           make(map[Ref]string, svcs+eps+nodes+refused),
	}
	var errs []FileError
	for _, name := range c.names {
		e := c.files[name]
		if e.err != nil {
			errs = append(errs, *e.err)
			if !e.err.LastGood {
				continue
			}
		}
		errs = append(errs, objs.merge(e.objs, name)...)
	}
	return objs, errs
}
