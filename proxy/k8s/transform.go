package k8s

import (
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// slimmer is the informers' transform: it keeps, of each object, only what the model, the
// rejection Events and the drain check read, before the object enters the informer's cache
// (which the Tracker shares: one copy per object, not two). At 10,000 Services the caches are
// a large part of the daemon's memory, and in real clusters most of an object is bookkeeping
// no proxy reads: server-side-apply managedFields, kubectl's last-applied-configuration (a
// second copy of the whole object), owner references, the endpoints' targetRefs, a Node's
// image list and conditions. The transform is idempotent and leaves other types (tombstones)
// alone.
//
// What stays: names, namespace, UID, resourceVersion and creationTimestamp (informer
// bookkeeping, Event references, conflict order); a Service's service-proxy-name label (the
// only label the model reads), its nftproxy.io/ annotations (the only ones it reads: cloud
// load-balancer annotations and the like go), its spec except the selector and its
// status.loadBalancer; a slice's service-name label, its last-change-trigger-time annotation
// (the programming latency starts there), address type, ports and, of each endpoint, what the
// model reads (see slimEndpoint); a Node's labels (zone), addresses, taints and deletion
// timestamp.
//
// Endpoints are most of what the caches hold (100,000 at 10,000 Services of 10), so they are
// also packed: the endpoint array is cut to its length (the protobuf decoder grows it by
// doubling: room for 16 of 10), the condition pointers point at one shared true and one shared
// false, and node names and zones, repeated across every endpoint on a node, share one *string.
// Cached objects are read-only for everyone (client-go's rule), so sharing is safe.
type slimmer struct {
	yes, no bool // the shared condition values: yes is true, no stays false
	mu      sync.Mutex
	names   map[string]*string // interned node names and zones; reset when it holds maxInterned
}

// maxInterned bounds the interned names. A cluster's node names and zones fit many times over;
// a table that fills up (nodes replaced for months) is dropped and rebuilt, which costs only
// the sharing of the names seen before.
const maxInterned = 4096

func newSlimmer() *slimmer {
	return &slimmer{yes: true, names: map[string]*string{}}
}

// transform is the cache.TransformFunc.
func (sl *slimmer) transform(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		slimMeta(&o.ObjectMeta)
		o.Labels = only(o.Labels, annotation.ServiceProxyNameLabel)
		o.Annotations = keepAnnotations(o.Annotations)
		o.Spec.Selector = nil
		o.Status.Conditions = nil
	case *discoveryv1.EndpointSlice:
		slimMeta(&o.ObjectMeta)
		o.Labels = only(o.Labels, discoveryv1.LabelServiceName)
		o.Annotations = only(o.Annotations, corev1.EndpointsLastChangeTriggerTime)
		if cap(o.Endpoints) > len(o.Endpoints) {
			o.Endpoints = append([]discoveryv1.Endpoint(nil), o.Endpoints...)
		}
		sl.mu.Lock()
		for i := range o.Endpoints {
			sl.slimEndpoint(&o.Endpoints[i])
		}
		sl.mu.Unlock()
	case *corev1.Node:
		slimMeta(&o.ObjectMeta)
		o.Annotations = nil
		taints := o.Spec.Taints
		o.Spec = corev1.NodeSpec{Taints: taints}
		o.Status = corev1.NodeStatus{Addresses: o.Status.Addresses}
	}
	return obj, nil
}

// store is the informers' cache.TransformFunc: transform, and an EndpointSlice becomes a
// parsedSlice, a Service a packedService, what the informer then keeps of them.
func (sl *slimmer) store(obj any) (any, error) {
	switch obj.(type) {
	case *parsedSlice, *packedService:
		return obj, nil
	}
	obj, err := sl.transform(obj)
	if err != nil {
		return obj, err
	}
	switch o := obj.(type) {
	case *discoveryv1.EndpointSlice:
		return newParsedSlice(o), nil
	case *corev1.Service:
		if p, err := newPackedService(o); err == nil {
			return p, nil
		}
		// Not encodable (never seen): kept decoded, which every reader accepts too.
	}
	return obj, nil
}

// packedService is what the Service informer keeps of a Service: its metadata (the cache's key,
// the resource version) and the slimmed object encoded (model.PackedService), which the Tracker
// keeps too, one copy for both (model.Tracker.UpsertPackedService). A slimmed Service decoded
// took ~900 bytes (its 592-byte struct, the metadata's and spec's strings and slices): 9 MB at
// 10k Services; packed, with this metadata, ~330.
type packedService struct {
	cacheMeta
	packed *model.PackedService // never modified: copies share it
}

func newPackedService(s *corev1.Service) (*packedService, error) {
	ps, err := model.PackService(s)
	if err != nil {
		return nil, err
	}
	return &packedService{cacheMeta: cacheMetaOf(&s.ObjectMeta), packed: ps}, nil
}

// DeepCopyObject makes packedService a runtime.Object, as a cache holds.
func (p *packedService) DeepCopyObject() runtime.Object {
	c := *p
	return &c
}

// serviceOf is the Service a Service informer's object (or a tombstone's) holds, decoded; nil
// for anything else.
func serviceOf(obj any) *corev1.Service {
	switch o := tombstone(obj).(type) {
	case *packedService:
		return o.packed.Service()
	case *corev1.Service:
		return o
	}
	return nil
}

// parsedSlice is what the EndpointSlice informer keeps of a slice: its metadata (the cache's
// key, the resource version) and the model's parsed form, which the Tracker keeps too, one copy
// for both (model.Tracker.UpsertParsedEndpointSlice). A slimmed API object still took ~2.5 kB a
// slice of 10 endpoints (the endpoint array, its structs and strings): ~25 MB at 10k Services.
type parsedSlice struct {
	cacheMeta
	parsed *model.EndpointSlice // never modified: copies share it
}

func newParsedSlice(s *discoveryv1.EndpointSlice) *parsedSlice {
	return &parsedSlice{cacheMeta: cacheMetaOf(&s.ObjectMeta), parsed: model.ParseEndpointSlice(s)}
}

// DeepCopyObject makes parsedSlice a runtime.Object, as a cache holds.
func (p *parsedSlice) DeepCopyObject() runtime.Object {
	c := *p
	return &c
}

// cacheMeta is the metadata the informers read of what their caches keep (parsedSlice,
// packedService): the key, the resource version and the generation, the UID and the deletion
// timestamp. An embedded metav1.ObjectMeta and TypeMeta took 264 bytes an object, mostly empty
// fields: 5 MB at 10k Services and their slices. The informers read it through meta.Accessor,
// which asks GetObjectMeta for an ObjectMeta built on each call (a read-only view: nothing
// writes a cached object's metadata). The kind is empty, as an informer's decoded objects'.
type cacheMeta struct {
	namespace, name, resourceVersion string
	uid                              types.UID
	generation                       int64
	deletion                         *metav1.Time // never modified: shared with the API object
}

func cacheMetaOf(m *metav1.ObjectMeta) cacheMeta {
	return cacheMeta{namespace: m.Namespace, name: m.Name, resourceVersion: m.ResourceVersion, uid: m.UID,
		generation: m.Generation, deletion: m.DeletionTimestamp}
}

// GetObjectMeta makes the object's metadata readable through meta.Accessor.
func (m *cacheMeta) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Namespace: m.namespace, Name: m.name, ResourceVersion: m.resourceVersion, UID: m.uid,
		Generation: m.generation, DeletionTimestamp: m.deletion}
}

// GetObjectKind is runtime.Object's: the kind is not kept.
func (*cacheMeta) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// slimEndpoint keeps what the model reads of an endpoint (model.parseEndpoint): the first
// address (upstream proxies use only that one), the three conditions, the node name, the zone
// and the hints (forZones, and forNodes for trafficDistribution PreferSameNode), their names
// interned like node names and zones; targetRef, hostname and deprecatedTopology go. Called
// with sl.mu held.
func (sl *slimmer) slimEndpoint(e *discoveryv1.Endpoint) {
	e.TargetRef, e.Hostname, e.DeprecatedTopology = nil, nil, nil
	if len(e.Addresses) > 1 {
		e.Addresses = []string{e.Addresses[0]}
	}
	c := &e.Conditions
	c.Ready, c.Serving, c.Terminating = sl.condition(c.Ready), sl.condition(c.Serving), sl.condition(c.Terminating)
	e.NodeName, e.Zone = sl.intern(e.NodeName), sl.intern(e.Zone)
	if h := e.Hints; h != nil {
		if len(h.ForZones) == 0 && len(h.ForNodes) == 0 {
			e.Hints = nil
			return
		}
		for i := range h.ForZones {
			h.ForZones[i].Name = sl.internValue(h.ForZones[i].Name)
		}
		for i := range h.ForNodes {
			h.ForNodes[i].Name = sl.internValue(h.ForNodes[i].Name)
		}
	}
}

// internValue returns the shared copy of s. Called with sl.mu held.
func (sl *slimmer) internValue(s string) string {
	return *sl.intern(&s)
}

// condition returns the shared pointer of p's value (nil stays nil: unknown).
func (sl *slimmer) condition(p *bool) *bool {
	switch {
	case p == nil:
		return nil
	case *p:
		return &sl.yes
	}
	return &sl.no
}

// intern returns the shared pointer of p's value (nil stays nil). Called with sl.mu held.
func (sl *slimmer) intern(p *string) *string {
	if p == nil {
		return nil
	}
	if q, ok := sl.names[*p]; ok {
		return q
	}
	if len(sl.names) >= maxInterned {
		clear(sl.names)
	}
	sl.names[*p] = p
	return p
}

// slimMeta drops the metadata no proxy reads.
func slimMeta(m *metav1.ObjectMeta) {
	m.ManagedFields, m.OwnerReferences, m.Finalizers, m.GenerateName = nil, nil, nil, ""
}

// only returns m reduced to key (nil when key is absent), reusing m when it holds nothing else.
func only(m map[string]string, key string) map[string]string {
	v, ok := m[key]
	switch {
	case !ok:
		return nil
	case len(m) == 1:
		return m
	}
	return map[string]string{key: v}
}

// keptAnnotationPrefix is the prefix of the Service annotations the model reads: nftproxy's own.
const keptAnnotationPrefix = "nftproxy.io/"

// keepAnnotations returns the annotations under keptAnnotationPrefix (nil when none), reusing
// the map when nothing is dropped.
func keepAnnotations(a map[string]string) map[string]string {
	drop := 0
	for k := range a {
		if !strings.HasPrefix(k, keptAnnotationPrefix) {
			drop++
		}
	}
	switch {
	case drop == 0:
		return a
	case drop == len(a):
		return nil
	}
	out := make(map[string]string, len(a)-drop)
	for k, v := range a {
		if strings.HasPrefix(k, keptAnnotationPrefix) {
			out[k] = v
		}
	}
	return out
}
