package manifest

import (
	"os"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// settleTime is how long a file must have been left alone (its mtime and ctime that far in the
// past when a load starts) before its decoded objects are kept: a file written within the
// timestamps' granularity of a read could change again without its times changing.
const settleTime = time.Second

// fileCache keeps, across the Watcher's reloads, the objects decoded from each settled file, so
// a reload decodes only the files that changed: at 10,000 Services in one file a reload cost
// seconds, and every change of any file paid it before its sync. A file is reused while its
// inode, size, mtime and ctime are the same (ctime cannot be set back by a writer, a rename
// over it brings a new inode). EndpointSlices and Nodes are handed out as they were decoded
// (nothing writes to them); Services are handed out as fresh copies of the decoded ones, since
// manifest mode's node-port assigner writes its assignments into the Services it is given (the
// pristine copies cost 8 MB at 10,000 Services).
type fileCache struct {
	now   func() time.Time
	files map[string]cachedFile
}

type cachedFile struct {
	key  fileKey
	objs Objects // Services and Refused Services are kept pristine, handed out as copies
}

type fileKey struct {
	ino                  uint64
	size                 int64
	mtimeNano, ctimeNano int64
}

func newFileCache() *fileCache {
	return &fileCache{now: time.Now, files: map[string]cachedFile{}}
}

// keyOf is st's identity, and false when the platform does not say (then nothing is cached).
func keyOf(st os.FileInfo) (fileKey, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{ino: sys.Ino, size: st.Size(), mtimeNano: st.ModTime().UnixNano(),
		ctimeNano: time.Unix(sys.Ctim.Unix()).UnixNano()}, true
}

// get returns the objects of name when st is the file they were decoded from.
func (c *fileCache) get(name string, st os.FileInfo) (Objects, bool) {
	if c == nil {
		return Objects{}, false
	}
	e, ok := c.files[name]
	if k, known := keyOf(st); !ok || !known || k != e.key {
		return Objects{}, false
	}
	return e.objs.withServiceCopies(), true
}

// put keeps objs, decoded from name as st describes it when the load started at start, if the
// file has settled. The caller keeps objs itself: the cache holds copies of its Services.
func (c *fileCache) put(name string, st os.FileInfo, objs Objects, start time.Time) {
	if c == nil {
		return
	}
	delete(c.files, name)
	k, ok := keyOf(st)
	settled := start.Add(-settleTime).UnixNano()
	if !ok || k.mtimeNano > settled || k.ctimeNano > settled {
		return
	}
	c.files[name] = cachedFile{key: k, objs: objs.withServiceCopies()}
}

// keep forgets the files not in seen (deleted, renamed, or now failing).
func (c *fileCache) keep(seen map[string]bool) {
	if c == nil {
		return
	}
	for name := range c.files {
		if !seen[name] {
			delete(c.files, name)
		}
	}
}

// withServiceCopies returns o with deep copies of its Services (and refused Services); the rest
// is shared.
func (o Objects) withServiceCopies() Objects {
	out := o
	out.Services = make([]*corev1.Service, len(o.Services))
	for i, s := range o.Services {
		out.Services[i] = s.DeepCopy()
	}
	out.Refused = make([]RefusedService, len(o.Refused))
	for i, r := range o.Refused {
		out.Refused[i] = RefusedService{Service: r.Service.DeepCopy(), Rejection: r.Rejection}
	}
	return out
}
