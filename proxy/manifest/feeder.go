package manifest

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/proxy/model"
)

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
