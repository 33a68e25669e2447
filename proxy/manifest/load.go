// Package manifest is the file source of nftproxy's embedded mode: it loads Service,
// EndpointSlice and Node manifests from a directory, fills in the defaults the API server would,
// watches the directory for changes and feeds the result into a model.Tracker.
//
// Only the directory itself is read, not subdirectories, and only regular files (or symlinks
// to them) named *.yaml, *.yml or *.json whose names do not start with '.'; this matches a
// ConfigMap mounted as a volume, whose "..data" machinery is hidden. A YAML file may hold
// several documents separated by "---"; any document may be a "kind: List", and a List may hold
// Lists down to MaxListDepth. Decoding is strict: an unknown or duplicated field (or mapping
// key) is an error, so a typo such as "targetport" is reported instead of silently defaulted.
// A file larger than the loader's MaxFileBytes is refused unread. Documents are decoded as they
// are read; the Watcher's reloads decode only the files that changed (see fileCache). A
// Service, EndpointSlice or Node written as JSON (or converted from YAML) is decoded straight
// into its type by a strict encoding/json/v2 decoder, anything else by the API machinery's
// strict decoder, which also has the last word on every document the first one refuses (see
// decoder).
//
// Decoding is most of a load. At 10,000 Services × 10 endpoints (bench/cmd/manifests: one 17 MB
// file of 20,001 JSON documents) a load takes 0.37 s [0.26–0.49] on 2 cores, where the API
// machinery's decoder alone took 0.77 s [0.67–0.87], and allocates 122 MB instead of 188 MB
// (`go test -run - -bench BenchmarkLoad/json -benchtime 5x ./proxy/manifest/`, five runs of each
// build alternated, other builds running beside them). The same documents written as YAML take
// ~4 s either way (BenchmarkLoad/yaml): go-yaml's parser and its conversion to JSON
// (sigs.k8s.io/yaml) are three quarters of it, and are what a large YAML file waits for.
//
// Objects are then checked as the API server would check them (see validate.go): a Service that
// fails is kept as a rejected Service with a reason, an EndpointSlice or Node that fails is left
// out, and an endpoint whose address is not usable (model.SpecialAddress: loopback,
// link-local, multicast, unspecified, broadcast, a cloud metadata address) is dropped from its
// slice. Each is reported; the rest
// of the file loads.
//
// A directory that is present and empty means "no Services". A directory that is missing or
// cannot be read is not empty: the load fails as a whole (a FileError with Directory set) and
// callers keep what they had.
//
// No bad read deletes anything. A file that cannot be used (a stat, open or read error, a
// document that does not decode, too large) keeps the objects of its last good load: those of
// the loads before, or, at the first load of a Loader with LastGoodDir (a restart), those of the
// copy kept there as the file last decoded (lastgood.go). Only a confirmed absence (not in a
// listing that succeeded, or a stat saying "not found") drops a file. The Watcher retries
// unreadable files every PollInterval, waits for files written in place to settle before it
// reads them (SettleInterval), and reports a source with bad files as failing.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// Objects is everything loaded from a directory, in file order.
type Objects struct {
	Services []*corev1.Service
	// EndpointSlices are kept as the model reads them, parsed as they are decoded: the decoded
	// API objects took three times the memory (~30 MB at 10,000 slices of 10 endpoints) and
	// nothing else reads them.
	EndpointSlices []*model.EndpointSlice
	Nodes          []*corev1.Node
	// Refused are Services the API server would refuse, each with its rejection; they are fed
	// to the Tracker as rejected (Tracker.RejectService), so they show up like any rejection.
	Refused []RefusedService
	// Invalid lists EndpointSlices and Nodes left out, and endpoints dropped from slices, because
	// the API server would refuse them; the rest of their file loads.
	Invalid []Invalid
	// Skipped lists documents of kinds nftproxy does not use (Deployments and the like), so a
	// caller can mention them; they are not errors.
	Skipped []Skipped
	// From maps each loaded object to the file it came from.
	From map[Ref]string
}

// Ref names one loaded object. Namespace is empty for Nodes.
type Ref struct {
	Kind      string
	Namespace string
	Name      string
}

// String returns "Kind ns/name" or "Kind name".
func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// RefusedService is a Service that fails the API server's validation, and why.
type RefusedService struct {
	Service   *corev1.Service
	Rejection *model.Rejection
}

// Invalid is an object, or one endpoint of an EndpointSlice, left out because the API server
// would refuse it.
type Invalid struct {
	File     string
	Document int
	Ref      Ref
	// Endpoint is the index (from 0) of the endpoint dropped from the slice, or -1 when the
	// whole object is left out.
	Endpoint int
	Problem  string
}

// Error names the file, the object and the problem, and says what happens.
func (i Invalid) Error() string {
	if i.Endpoint >= 0 {
		return fmt.Sprintf("%s document %d: %s: endpoint %d dropped, the API server would refuse it: %s; fix or remove the endpoint",
			i.File, i.Document, i.Ref, i.Endpoint, i.Problem)
	}
	return fmt.Sprintf("%s document %d: %s left out, the API server would refuse it: %s; fix the manifest", i.File, i.Document, i.Ref, i.Problem)
}

// Skipped is a document of a kind nftproxy does not read.
type Skipped struct {
	File       string
	Document   int
	APIVersion string
	Kind       string
	Name       string
}

// FileError says which file and document could not be used and why. Document counts from 1;
// 0 means the file as a whole (unreadable, too large). Directory is set when the directory
// itself could not be read: then nothing was loaded, and the load says nothing about which
// objects exist.
//
// A file that cannot be used keeps the objects of its last good load (LastGood): those of the
// load before while the Watcher runs, or at the first load its copy in Loader.LastGoodDir. A
// file is only ever dropped when it is seen to be gone: absent from a listing of the directory
// that succeeded (or its stat saying so), never because a stat or a read failed.
type FileError struct {
	File      string
	Document  int
	Err       error
	Directory bool
	// Unreadable: the file could not be stat'ed, opened or read (an I/O or permission error,
	// not its content). No event may say when that clears, so the Watcher tries it again
	// every PollInterval.
	Unreadable bool
	// Duplicate: the file loaded, but an object it defines was defined in an earlier file too;
	// that object is left out and the rest of the file is used. Not a bad file.
	Duplicate bool
	// LastGood: the load holds the objects of the file's last good load in its place.
	LastGood bool
}

// BadFiles returns the errors of the files that could not be used (read, or decoded): each
// such file is served from its last good state, if it has one, and a source with bad files is
// not healthy. Directory errors and duplicates are not among them.
func BadFiles(errs []FileError) []FileError {
	var bad []FileError
	for _, e := range errs {
		if !e.Directory && !e.Duplicate {
			bad = append(bad, e)
		}
	}
	return bad
}

// DirectoryError returns the error of a load that could not read its directory, or nil. A
// caller must then keep its last good state: a missing directory is not "no Services".
func DirectoryError(errs []FileError) error {
	for _, e := range errs {
		if e.Directory {
			return e
		}
	}
	return nil
}

// Error returns e.g. `services.yaml document 2: ...`.
func (e FileError) Error() string {
	kept := ""
	if e.LastGood {
		kept = " (its objects of the last good load are kept)"
	}
	if e.Document == 0 {
		return fmt.Sprintf("%s: %v%s", e.File, e.Err, kept)
	}
	return fmt.Sprintf("%s document %d: %v%s", e.File, e.Document, e.Err, kept)
}

// Unwrap returns the underlying error.
func (e FileError) Unwrap() error { return e.Err }

// DefaultMaxFileBytes is the default per-file size limit: 32 MiB. 10,000 Services with one
// EndpointSlice each take 7.3 MB of YAML in one file with one endpoint per slice and 16 MB with
// ten (bench/workload's mix), so realistic files fit twice over, while a runaway file cannot
// make the daemon decode hundreds of megabytes. Documents are decoded as they are read, and
// EndpointSlices kept parsed: loading the 16 MB JSON file (bench/cmd/manifests) peaks at 41 MB
// of heap and keeps 22 MB of objects (half of it the parsed slices, most of the rest the
// Services); YAML documents cost more, as they go through the YAML parser first.
const DefaultMaxFileBytes = 32 << 20

// MaxListDepth is how deeply Lists may nest: a List may hold Lists, which may hold Lists, and
// no deeper. Nobody writes deeper Lists by hand, and each level decodes its items again.
const MaxListDepth = 3

// Loader reads manifest directories with limits.
type Loader struct {
	// MaxFileBytes is the largest file read; larger files are refused with a FileError naming
	// the limit. 0 means DefaultMaxFileBytes.
	MaxFileBytes int64
	// LastGoodDir, if set, is where a copy of each file is kept as it last loaded without
	// error (see lastGood): a file that cannot be used the first time a Loader (or Watcher)
	// sees it is replaced by its copy there. Empty: no copies, and such a file brings no
	// objects until it can be used.
	LastGoodDir string
	// Log receives what happens to the copies in LastGoodDir (used, not written).
	Log logr.Logger
	// OnLastGood, if set, is called with the file's name each time a file's copy in
	// LastGoodDir is loaded in its place.
	OnLastGood func(file string)

	// stat and open replace os.Stat and os.Open in tests (a stat that fails other than with
	// "not found" cannot be made with permissions when tests run as root).
	stat func(string) (os.FileInfo, error)
	open func(string) (io.ReadCloser, error)
}

func (l Loader) statFile(path string) (os.FileInfo, error) {
	if l.stat != nil {
		return l.stat(path)
	}
	return os.Stat(path)
}

func (l Loader) openFile(path string) (io.ReadCloser, error) {
	if l.open != nil {
		return l.open(path)
	}
	return os.Open(path)
}

func (l Loader) copies() lastGood { return lastGood{dir: l.LastGoodDir} }

// Load reads dir with the default limits (see Loader.Load).
func Load(dir string) (Objects, []FileError) { return Loader{}.Load(dir) }

// Load reads every manifest file of dir. Files are read in name order. A file with any error
// contributes no objects of its own and one FileError (with LastGoodDir, its last good copy's
// objects instead); other files load normally. An object defined twice keeps its first
// definition and the second is reported as a FileError. A directory that cannot be read gives
// a single FileError with Directory set (see DirectoryError); an empty directory gives no
// objects and no error.
func (l Loader) Load(dir string) (Objects, []FileError) { return l.load(dir, nil) }

// load is Load, reusing the objects of the settled files that have not changed since cache got
// them, and leaving in cache what it found for the reloads to come (nil: decode every file,
// keep nothing). Files in cache.hold (being written) are left as cache has them.
func (l Loader) load(dir string, cache *fileCache) (Objects, []FileError) {
	if cache == nil {
		cache = newFileCache()
	}
	start := cache.now()
	cache.decoded = 0
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Objects{From: map[Ref]string{}}, []FileError{{File: dir, Directory: true,
			Err: fmt.Errorf("read manifest directory: %w (restore it, or point --manifests at it)", err)}}
	}
	dec := newDecoder()
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		name := e.Name()
		if !isManifestName(name) {
			continue
		}
		if cache.hold[name] {
			if _, known := cache.files[name]; known {
				seen[name] = true
			}
			continue
		}
		path := filepath.Join(dir, name)
		st, err := l.statFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist), err == nil && !st.Mode().IsRegular():
			continue // gone since the listing, a dangling symlink, not a file: not a manifest
		case err != nil:
			seen[name] = true
			l.failed(cache, name, nil, &FileError{File: name, Unreadable: true, Err: unreadable(err)}, start)
			continue
		}
		seen[name] = true
		if !cache.reusable(name, st) {
			l.decode(dec, cache, path, name, st, start)
		}
	}
	for _, name := range slices.Clone(cache.names) {
		if !seen[name] {
			l.forget(cache, name)
		}
	}
	if !cache.pruned {
		// The first load writes its copies itself, then removes those of absent files and
		// what a crash left: no copier is writing meanwhile.
		cache.pruned = true
		l.writeCopies(cache, false)
		if err := l.copies().prune(seen); err != nil {
			l.Log.Error(err, "Last good copies of removed manifest files not removed")
		}
	} else {
		l.writeCopies(cache, true)
	}
	return cache.assemble()
}

// writeCopies hands the copies of the load to the cache's copier (async, if it has one), or
// writes them.
func (l Loader) writeCopies(cache *fileCache, async bool) {
	jobs := cache.copies
	cache.copies = nil
	if async && cache.copier != nil {
		cache.copier.add(jobs)
		return
	}
	if err := l.copies().write(jobs); err != nil {
		l.Log.Error(err, "Last good copy of a manifest file not kept: if the file cannot be read at the next start, its Services are not served until it is fixed")
	}
}

// unreadable says what a failed stat, open or read means for the file's objects.
func unreadable(err error) error {
	return fmt.Errorf("%w (the file cannot be read; its objects stay as last loaded, and it is read again once it can be)", err)
}

// forget drops a file seen to be gone, and its last good copy.
func (l Loader) forget(cache *fileCache, name string) {
	cache.forget(name)
	if l.copies().enabled() {
		cache.copies = append(cache.copies, copyJob{name: name, remove: true})
	}
}

// loadChanged reloads only the files named in changed (base names within dir), and takes every
// other file as cache holds it from the loads before: cache must have seen a full load of dir
// (load) and every change of its files since, which the Watcher's inotify events guarantee. A
// named file that is gone, or no longer a regular manifest file, is dropped; one that cannot
// be stat'ed keeps its last good objects.
func (l Loader) loadChanged(dir string, cache *fileCache, changed map[string]bool) (Objects, []FileError) {
	start := cache.now()
	cache.decoded = 0
	var dec *decoder
	for name := range changed {
		if !isManifestName(name) {
			continue
		}
		path := filepath.Join(dir, name)
		st, err := l.statFile(path)
		switch {
		case errors.Is(err, fs.ErrNotExist), err == nil && !st.Mode().IsRegular():
			l.forget(cache, name)
			continue
		case err != nil:
			l.failed(cache, name, nil, &FileError{File: name, Unreadable: true, Err: unreadable(err)}, start)
			continue
		}
		if dec == nil {
			dec = newDecoder()
		}
		l.decode(dec, cache, path, name, st, start)
	}
	l.writeCopies(cache, true)
	return cache.assemble()
}

// decode reads one file into cache, keeping what decoded as its last good copy (LastGoodDir):
// in memory for a small file, in a temporary file written as it is read for a large one.
func (l Loader) decode(dec *decoder, cache *fileCache, path, name string, st os.FileInfo, start time.Time) {
	cache.decoded++
	var (
		mem  *bytes.Buffer
		tmp  *os.File
		disk *errWriter
		tee  io.Writer
	)
	if g := l.copies(); g.enabled() && !g.current(name, st) {
		if st.Size() <= maxMemoryCopy {
			mem = bytes.NewBuffer(make([]byte, 0, st.Size()+1))
			tee = mem
		} else if f, err := g.create(name); err != nil {
			l.Log.Error(err, "Last good copy of a manifest file not kept: if the file cannot be read at the next start, its Services are not served until it is fixed", "file", name)
		} else {
			tmp, disk = f, &errWriter{w: f}
			tee = disk
		}
	}
	objs, ferr := l.loadFile(dec, path, name, st, l.limit(), tee)
	job := copyJob{name: name, mtime: st.ModTime()}
	switch {
	case mem != nil:
		job.data = mem.Bytes()
	case tmp != nil:
		job.tmp = tmp.Name()
		err := disk.err
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil || ferr != nil {
			job.drop() // never a torn copy, never a copy of what did not decode
			if err != nil && ferr == nil {
				l.Log.Error(err, "Last good copy of a manifest file not kept: if the file cannot be read at the next start, its Services are not served until it is fixed", "file", name)
			}
			tmp = nil
		}
	}
	if ferr != nil {
		l.failed(cache, name, st, ferr, start)
		return
	}
	if mem != nil || tmp != nil {
		cache.copies = append(cache.copies, job)
	}
	cache.record(name, st, objs, nil, start)
}

// errWriter writes to w and keeps the first error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (l Loader) limit() int64 {
	if l.MaxFileBytes <= 0 {
		return DefaultMaxFileBytes
	}
	return l.MaxFileBytes
}

// failed records that name could not be used (ferr; st is nil when it could not be stat'ed).
// Its objects stay as the last good load gave them: those cache holds, or when cache has never
// seen the file (the first load), those of its copy in LastGoodDir.
func (l Loader) failed(cache *fileCache, name string, st os.FileInfo, ferr *FileError, start time.Time) {
	prev, known := cache.files[name]
	switch {
	case known && (prev.err == nil || prev.err.LastGood):
		ferr.LastGood = true
		cache.record(name, st, prev.objs, ferr, start)
		return
	case known || !l.copies().enabled():
		cache.record(name, st, Objects{}, ferr, start)
		return
	}
	objs, cerr := l.loadCopy(cache, name)
	switch {
	case errors.Is(cerr, fs.ErrNotExist):
	case cerr != nil:
		l.Log.Error(cerr, "Last good copy of a manifest file that cannot be used does not load either; its objects are not served until the file is fixed", "file", name, "error", ferr.Error())
	default:
		ferr.LastGood = true
		l.Log.Info("Manifest file cannot be used; serving the objects of its last good copy until it is fixed", "file", name, "error", ferr.Err.Error(), "copy", l.copies().path(name))
		if l.OnLastGood != nil {
			l.OnLastGood(name)
		}
	}
	cache.record(name, st, objs, ferr, start)
}

// loadCopy decodes name's copy in LastGoodDir, or the copy the copier is about to write.
func (l Loader) loadCopy(cache *fileCache, name string) (Objects, error) {
	from, path := Loader{}, l.copies().path(name)
	if j, ok := cache.queued(name); ok {
		switch {
		case j.remove:
			return Objects{}, fs.ErrNotExist
		case j.tmp != "":
			path = j.tmp
		default:
			from.open = func(string) (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(j.data)), nil }
		}
	}
	var st os.FileInfo
	if from.open == nil {
		var err error
		if st, err = os.Stat(path); err != nil {
			return Objects{}, err
		}
	}
	objs, ferr := from.loadFile(newDecoder(), path, name, st, l.limit(), nil)
	if ferr != nil {
		return Objects{}, ferr
	}
	return objs, nil
}

func isManifestName(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// merge adds one file's objects, refusing duplicates of objects already loaded.
func (o *Objects) merge(f Objects, file string) []FileError {
	var errs []FileError
	add := func(ref Ref) bool {
		if first, dup := o.From[ref]; dup {
			errs = append(errs, FileError{File: file, Duplicate: true,
				Err: fmt.Errorf("%s is also defined in %s; the first definition is used, remove one of them", ref, first)})
			return false
		}
		o.From[ref] = file
		return true
	}
	for _, s := range f.Services {
		if add(Ref{"Service", s.Namespace, s.Name}) {
			o.Services = append(o.Services, s)
		}
	}
	for _, r := range f.Refused {
		if add(Ref{"Service", r.Service.Namespace, r.Service.Name}) {
			o.Refused = append(o.Refused, r)
		}
	}
	o.Invalid = append(o.Invalid, f.Invalid...)
	for _, s := range f.EndpointSlices {
		if add(Ref{"EndpointSlice", s.Namespace, s.Name}) {
			o.EndpointSlices = append(o.EndpointSlices, s)
		}
	}
	for _, n := range f.Nodes {
		if add(Ref{"Node", "", n.Name}) {
			o.Nodes = append(o.Nodes, n)
		}
	}
	o.Skipped = append(o.Skipped, f.Skipped...)
	return errs
}

// loadFile decodes one file, whose stat is st; any error discards the whole file. Documents are
// decoded as they are read, so neither the file nor its documents are held whole: only the
// objects stay. The bytes read are also written to copy, if set. Errors keep the precedence
// of reading the file first: too large, then unreadable or not splittable into documents, then
// the first document that does not decode.
func (l Loader) loadFile(dec *decoder, path, name string, st os.FileInfo, limit int64, copy io.Writer) (Objects, *FileError) {
	tooLarge := &FileError{File: name, Err: fmt.Errorf("file is larger than the limit of %d bytes (--manifest-max-file-size); split it into several files or raise the limit", limit)}
	if st != nil && st.Size() > limit {
		return Objects{}, tooLarge
	}
	f, err := l.openFile(path)
	if err != nil {
		return Objects{}, &FileError{File: name, Unreadable: true, Err: unreadable(err)}
	}
	defer f.Close()
	// Reading no more than limit+1 bytes of a file that grows meanwhile.
	in := &countingReader{r: io.LimitReader(f, limit+1), copy: copy}
	docs := &docReader{r: bufio.NewReader(in)}
	var (
		out       Objects
		decodeErr *FileError
		batch     [][]byte
		first     = 1 // the document number of batch[0]
		// decoding waits for the batch being decoded while the next one is read, and appends
		// its objects to out; nil when none is.
		decoding func(out *Objects) *FileError
	)
	flush := func() {
		if decoding != nil && decodeErr == nil {
			decodeErr = decoding(&out)
		}
		decoding = nil
		if decodeErr == nil && len(batch) > 0 {
			decoding = startBatch(dec, batch, name, first)
		}
		first += len(batch)
		batch = make([][]byte, 0, decodeBatchSize) // the one started is still being read
	}
	defer func() { // a file refused while a batch is decoding
		if decoding != nil {
			decoding(&Objects{})
		}
	}()
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			switch {
			case in.n > limit:
				return Objects{}, tooLarge
			case in.err != nil:
				return Objects{}, &FileError{File: name, Unreadable: true, Err: unreadable(in.err)}
			}
			return Objects{}, &FileError{File: name, Err: fmt.Errorf("split YAML documents: %w", err)}
		}
		if decodeErr != nil {
			continue // read on: a size or split error still comes first
		}
		if batch = append(batch, doc); len(batch) == decodeBatchSize {
			flush()
		}
	}
	flush()
	flush() // waits for the last batch
	if in.n > limit {
		return Objects{}, tooLarge
	}
	if decodeErr != nil {
		return Objects{}, decodeErr
	}
	return out, nil
}

// decodeBatchSize is how many documents are read before they are decoded together: enough to
// keep every core busy, few enough that the raw documents waiting are a small part of the file.
const decodeBatchSize = 512

// startBatch starts decoding the documents of one batch (document numbers first, first+1, ...)
// on every core — decoding is most of a load's time, and the next batch is read meanwhile —
// and returns a function that waits for them and appends their objects to out in document
// order. That function returns the error of the first document that does not decode; it must
// be called once, and the batch's documents are not to be changed until it returns.
func startBatch(dec *decoder, docs [][]byte, file string, first int) func(out *Objects) *FileError {
	parts := make([]Objects, len(docs))
	errs := make([]error, len(docs))
	workers := min(goruntime.GOMAXPROCS(0), len(docs))
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < len(docs); i += workers {
				errs[i] = decodeDocument(dec, docs[i], file, first+i, 0, &parts[i])
			}
		}()
	}
	return func(out *Objects) *FileError {
		wg.Wait()
		for i := range docs {
			if errs[i] != nil {
				return &FileError{File: file, Document: first + i, Err: errs[i]}
			}
			out.Services = append(out.Services, parts[i].Services...)
			out.EndpointSlices = append(out.EndpointSlices, parts[i].EndpointSlices...)
			out.Nodes = append(out.Nodes, parts[i].Nodes...)
			out.Refused = append(out.Refused, parts[i].Refused...)
			out.Invalid = append(out.Invalid, parts[i].Invalid...)
			out.Skipped = append(out.Skipped, parts[i].Skipped...)
		}
		return nil
	}
}

// countingReader counts the bytes read and keeps the read error (other than EOF), so a file
// that grew past the limit or failed to read is told apart from a document that does not split.
// It writes what it reads to copy, if set; a failed write ends the copying, not the read.
type countingReader struct {
	r    io.Reader
	n    int64
	err  error
	copy io.Writer
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.copy != nil && n > 0 {
		if _, werr := c.copy.Write(p[:n]); werr != nil {
			c.copy = nil // the writer keeps its error
		}
	}
	if err != nil && !errors.Is(err, io.EOF) {
		c.err = err
	}
	return n, err
}

// addService keeps a valid Service, or records a refused one with its rejection.
func (o *Objects) addService(s *corev1.Service, file string, doc int) {
	key := model.ServiceKey{Namespace: s.Namespace, Name: s.Name}
	if r := validateService(s).rejection(key, fmt.Sprintf("%s document %d", file, doc)); r != nil {
		o.Refused = append(o.Refused, RefusedService{Service: s, Rejection: r})
		return
	}
	o.Services = append(o.Services, s)
}

// addSlice keeps a valid EndpointSlice without its unusable endpoints, parsed for the model, or
// records it as invalid.
func (o *Objects) addSlice(s *discoveryv1.EndpointSlice, file string, doc int) {
	ref := Ref{"EndpointSlice", s.Namespace, s.Name}
	if errs := validateSliceMeta(s); len(errs) > 0 {
		o.Invalid = append(o.Invalid, Invalid{File: file, Document: doc, Ref: ref, Endpoint: -1, Problem: errorsText(errs)})
		return
	}
	kept := s.Endpoints[:0] // filtered in place: the slice was just decoded, nobody else holds it
	for i := range s.Endpoints {
		if why := endpointProblem(s, i); why != "" {
			o.Invalid = append(o.Invalid, Invalid{File: file, Document: doc, Ref: ref, Endpoint: i, Problem: why})
			continue
		}
		kept = append(kept, s.Endpoints[i])
	}
	s.Endpoints = kept
	o.EndpointSlices = append(o.EndpointSlices, model.ParseEndpointSlice(s))
}
