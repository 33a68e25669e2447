package model

import (
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
)

// TrackerConfig configures a Tracker.
type TrackerConfig struct {
	// NodeName is the node nftproxy runs on; Nodes with other names are ignored. Empty accepts
	// any Node (meant for single-node manifest directories).
	NodeName string
	// ProxyName is the service-proxy-name this proxy answers to (see HandlesService).
	ProxyName string
	Logger    logr.Logger
	// OnRejection is called when a Service's rejection appears or changes, and with r == nil
	// when a rejected Service becomes accepted, ignored or deleted. It is not called again for an
	// unchanged rejection, so Events and logs are emitted once per change. Calls are serialised
	// and ordered; the callback may read from the Tracker but must not write to it.
	OnRejection func(key ServiceKey, r *Rejection)
	// Now is the clock for change timestamps; time.Now if nil.
	Now func() time.Time
	// Guard is what every Service is checked against on this node (reserved ports, the
	// node-port block range); the node's addresses come from the Node object and from
	// SetLocalAddresses.
	Guard GuardConfig
}

// Tracker holds the current Services, EndpointSlices and Node, keeps the model of each Service
// up to date as they change, and records what changed for the sync loop. Sources call its
// Upsert/Delete methods from any goroutine. A change recomputes only the Services it touches
// (plus those whose port claims overlap them), so cost follows the change, not the cluster.
type Tracker struct {
	cfg TrackerConfig
	// notifyMu serialises rejection callbacks in change order without holding mu.
	notifyMu sync.Mutex
	mu       sync.Mutex

	services map[ServiceKey]*trackedService
	// slices are the owned EndpointSlices by owner, each owner's in name order; byID holds
	// them by their own namespace/name. Slices without an owner are not kept.
	slices  map[ServiceKey][]*EndpointSlice
	byID    map[ServiceKey]*EndpointSlice
	claims  claimIndex
	node    *corev1.Node
	nodeMdl *Node
	// local are the addresses the kernel holds in nftproxy's network namespace
	// (SetLocalAddresses); nodeAddrs is their union with the Node object's addresses.
	local     []netip.Addr
	nodeAddrs NodeAddresses
	// byAddr indexes Services by the addresses they name, so a node-address change rebuilds
	// only the Services on the addresses that came or went.
	byAddr map[netip.Addr]*keySet

	changed     map[ServiceKey]bool
	nodeChanged bool
	since       time.Time
	counts      changeCounter // kube-proxy's change metrics (ChangeCounts)
	// latency holds when each pending change started (tracker_latency.go).
	latency latencyStarts
}

type trackedService struct {
	obj      *corev1.Service // nil once deleted, or when the Service is held packed
	packed   *PackedService  // the Service as its source keeps it packed (UpsertPackedService)
	base     *Service        // FromService result; nil when ignored
	claims   []claim
	created  time.Time
	final    *Service // published model; nil when ignored
	warnings []string
	// refused is the accepted model the kernel refused (final then holds the rejection); nil
	// when not refused. See RecordKernelRefusal.
	refused *Service
	// lost are the claims the Service lost to older Services at its last conflict resolution;
	// an endpoint change settles its new model with them (see settle).
	lost []lost
	// invalid is the source's own rejection (RejectService); it replaces conversion.
	invalid *Rejection
	addrs   []netip.Addr // addresses the Service names, indexed in Tracker.byAddr
}

// NewTracker returns an empty Tracker.
func NewTracker(cfg TrackerConfig) *Tracker {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Tracker{
		cfg:      cfg,
		services: map[ServiceKey]*trackedService{},
		slices:   map[ServiceKey][]*EndpointSlice{},
		byID:     map[ServiceKey]*EndpointSlice{},
		claims:   claimIndex{},
		changed:  map[ServiceKey]bool{},
		byAddr:   map[netip.Addr]*keySet{},
		latency:  newLatencyStarts(cfg.Now()),
	}
}

// rejectionEvent is a callback to deliver after the state lock is released.
type rejectionEvent struct {
	key ServiceKey
	r   *Rejection
}

// update runs fn under the lock, then delivers the rejection events it produced.
func (t *Tracker) update(fn func() []rejectionEvent) {
	t.notifyMu.Lock()
	defer t.notifyMu.Unlock()
	t.mu.Lock()
	events := fn()
	t.mu.Unlock()
	if t.cfg.OnRejection == nil {
		return
	}
	for _, e := range events {
		t.cfg.OnRejection(e.key, e.r)
	}
}

// UpsertService adds or replaces a Service.
func (t *Tracker) UpsertService(svc *corev1.Service) { t.upsertService(svc, nil) }

// RejectService adds or replaces a Service that its source refused before conversion, with the
// source's reason: manifest mode makes the API server's validation itself, and a refused Service
// must be reported (OnRejection, Snapshot) exactly like one the model rejects. An UpsertService
// of the same key later replaces the refusal. r.Message should start with "service ns/name: ".
func (t *Tracker) RejectService(svc *corev1.Service, r *Rejection) {
	if r != nil {
		t.upsertService(svc, r)
	}
}

// upsertService records svc, refused by its source with invalid (nil: to be converted).
func (t *Tracker) upsertService(svc *corev1.Service, invalid *Rejection) {
	if svc == nil {
		return
	}
	key := ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
	t.update(func() []rejectionEvent {
		ts := t.services[key]
		if ts == nil {
			ts = &trackedService{}
			t.services[key] = ts
		} else if ts.obj != nil && reflect.DeepEqual(ts.invalid, invalid) && equality.Semantic.DeepEqual(ts.obj, svc) {
			t.counts.countService(key, false)
			return nil
		}
		t.counts.countService(key, true)
		ts.obj, ts.packed, ts.invalid = svc, nil, invalid
		return t.recompute([]ServiceKey{key})
	})
}

// DeleteService removes a Service; its EndpointSlices stay until they are deleted themselves.
func (t *Tracker) DeleteService(key ServiceKey) {
	t.update(func() []rejectionEvent {
		ts := t.services[key]
		t.counts.countService(key, ts != nil && ts.held())
		if ts == nil || !ts.held() {
			return nil
		}
		ts.obj, ts.packed, ts.invalid = nil, nil, nil
		return t.recompute([]ServiceKey{key})
	})
}

// UpsertEndpointSlice adds or replaces an EndpointSlice. Slices without the
// kubernetes.io/service-name label belong to no Service and are dropped.
func (t *Tracker) UpsertEndpointSlice(s *discoveryv1.EndpointSlice) {
	t.UpsertParsedEndpointSlice(ParseEndpointSlice(s))
}

// UpsertParsedEndpointSlice is UpsertEndpointSlice for a slice its source parsed already
// (manifest mode parses each slice as it decodes it and keeps only the parsed form). The
// Tracker keeps s; s must not be modified afterwards. An update that equals the slice held,
// as the model reads it, changes nothing (as kube-proxy compares its own parsed slices).
func (t *Tracker) UpsertParsedEndpointSlice(s *EndpointSlice) {
	if s == nil {
		return
	}
	id := ServiceKey{Namespace: s.Namespace, Name: s.Name}
	counted := s.counted()
	t.update(func() []rejectionEvent {
		var affected []ServiceKey
		old, hadOld := t.byID[id]
		if hadOld {
			if old == s || old.equal(s) {
				if counted {
					t.counts.countSlice(false)
				}
				return nil
			}
			t.removeSlice(old)
			affected = append(affected, old.Owner)
		}
		if s.Owned {
			t.addSlice(s)
			if !hadOld || s.Owner != old.Owner {
				affected = append(affected, s.Owner)
			}
		}
		if counted {
			t.counts.countSlice(true)
		}
		before := t.published(s.Owner)
		events := t.recompute(affected)
		if s.Owned && t.published(s.Owner) != before {
			t.latency.triggered(s.Owner, s.TriggerTime) // this update changed the model
		}
		return events
	})
}

// DeleteEndpointSlice removes an EndpointSlice by namespace and name.
func (t *Tracker) DeleteEndpointSlice(namespace, name string) {
	id := ServiceKey{Namespace: namespace, Name: name}
	t.update(func() []rejectionEvent {
		old, ok := t.byID[id]
		if !ok {
			return nil
		}
		if old.counted() {
			t.counts.countSlice(true)
		}
		t.removeSlice(old)
		t.latency.sliceDeleted(old.Owner)
		return t.recompute([]ServiceKey{old.Owner})
	})
}

// addSlice records an owned slice, keeping its owner's slices in name order.
func (t *Tracker) addSlice(s *EndpointSlice) {
	list := t.slices[s.Owner]
	i, _ := slices.BinarySearchFunc(list, s.Name, func(e *EndpointSlice, name string) int { return strings.Compare(e.Name, name) })
	t.slices[s.Owner] = slices.Insert(list, i, s)
	t.byID[ServiceKey{Namespace: s.Namespace, Name: s.Name}] = s
}

func (t *Tracker) removeSlice(s *EndpointSlice) {
	list := slices.DeleteFunc(t.slices[s.Owner], func(e *EndpointSlice) bool { return e == s })
	if len(list) == 0 {
		delete(t.slices, s.Owner)
	} else {
		t.slices[s.Owner] = list
	}
	delete(t.byID, ServiceKey{Namespace: s.Namespace, Name: s.Name})
}

// UpsertNode records the node nftproxy runs on (others are ignored, see TrackerConfig.NodeName).
func (t *Tracker) UpsertNode(n *corev1.Node) {
	if n == nil || (t.cfg.NodeName != "" && n.Name != t.cfg.NodeName) {
		return
	}
	t.update(func() []rejectionEvent {
		if t.node != nil && equality.Semantic.DeepEqual(t.node, n) {
			return nil
		}
		t.node = n
		t.setNode(nodeFromObject(n))
		return t.refreshNodeAddrs()
	})
}

// DeleteNode forgets the node if name is the tracked one.
func (t *Tracker) DeleteNode(name string) {
	t.update(func() []rejectionEvent {
		if t.node == nil || t.node.Name != name {
			return nil
		}
		t.node = nil
		t.setNode(nil)
		return t.refreshNodeAddrs()
	})
}

func (t *Tracker) setNode(n *Node) {
	if reflect.DeepEqual(n, t.nodeMdl) {
		return
	}
	t.nodeMdl = n
	t.nodeChanged = true
	t.markPending()
}

// nodeFromObject keeps the InternalIP and ExternalIP addresses and the labels of a Node.
func nodeFromObject(n *corev1.Node) *Node {
	out := &Node{Name: n.Name, Labels: map[string]string{}}
	for k, v := range n.Labels {
		out.Labels[k] = v
	}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Zone() == "" {
			out.Addresses = append(out.Addresses, ip.Unmap())
		}
	}
	return out
}

func (t *Tracker) markPending() {
	if t.since.IsZero() {
		t.since = t.cfg.Now()
	}
}

// recompute re-converts the given Services, then re-resolves cross-service conflicts among
// every Service whose claims overlap theirs (transitively), and publishes what changed.
func (t *Tracker) recompute(keys []ServiceKey) []rejectionEvent {
	component := map[ServiceKey]bool{}
	var queue []ServiceKey
	visit := func(k ServiceKey) {
		if !component[k] {
			component[k] = true
			queue = append(queue, k)
		}
	}
	// stable: Services whose port claims and age did not change (an endpoint change, the common
	// case). They cannot change anyone's conflict outcome, so no neighbours are searched.
	stable := map[ServiceKey]bool{}
	for _, key := range keys {
		ts := t.services[key]
		if ts == nil {
			visit(key)
			continue
		}
		oldClaims, oldCreated, hadBase := ts.claims, ts.created, ts.base != nil
		t.reconvert(key, ts)
		if hadBase && ts.base != nil && oldCreated.Equal(ts.created) && reflect.DeepEqual(oldClaims, ts.claims) {
			stable[key] = true
			continue
		}
		visit(key)
		// Services that overlapped the old version may be freed by this change.
		t.claims.overlapping(key, oldClaims, visit)
		t.claims.remove(key, oldClaims)
		t.claims.add(key, ts.claims)
	}
	for len(queue) > 0 {
		k := queue[0]
		queue = queue[1:]
		if ts := t.services[k]; ts != nil {
			t.claims.overlapping(k, ts.claims, visit)
		}
	}
	finals := t.resolve(component)
	for k := range stable {
		if component[k] {
			continue
		}
		ts := t.services[k]
		finals[k] = settle(ts.base, ts.lost) // still loses the same claims to the same Services
	}
	return t.publish(finals)
}

// reconvert runs FromService for one tracked Service and logs new warnings.
func (t *Tracker) reconvert(key ServiceKey, ts *trackedService) {
	ts.base, ts.claims, ts.created = nil, nil, time.Time{}
	svc := ts.service()
	if svc == nil || !HandlesService(svc.Labels, t.cfg.ProxyName) {
		ts.warnings = nil
		t.indexAddrs(key, ts, nil)
		return
	}
	if ts.invalid != nil {
		ts.base, ts.created, ts.warnings = &Service{Key: key, Rejected: ts.invalid}, svc.CreationTimestamp.Time, nil
		t.indexAddrs(key, ts, nil)
		return
	}
	conv := fromService(svc, t.slices[key])
	ts.created = svc.CreationTimestamp.Time
	t.indexAddrs(key, ts, addressesOf(conv.Service))
	ts.base = guardService(conv.Service, t.nodeAddrs, &t.cfg.Guard)
	ts.claims = claimsOf(ts.base, t.nodeAddrs)
	if !reflect.DeepEqual(conv.Warnings, ts.warnings) && len(conv.Warnings) > 0 {
		t.cfg.Logger.Info("Service has problems that did not reject it", "service", key.String(), "warnings", conv.Warnings)
	}
	ts.warnings = conv.Warnings
}

// resolve decides conflicts within a component; Services without a model map to nil.
func (t *Tracker) resolve(component map[ServiceKey]bool) map[ServiceKey]*Service {
	rs := make([]ranked, 0, len(component))
	for k := range component {
		ts := t.services[k]
		if ts == nil || ts.base == nil {
			continue
		}
		rs = append(rs, ranked{key: k, created: ts.created, base: ts.base, claims: ts.claims})
	}
	res := resolveConflicts(rs)
	finals := make(map[ServiceKey]*Service, len(component))
	for k := range component {
		r := res[k]
		finals[k] = r.final
		if ts := t.services[k]; ts != nil {
			ts.lost = r.lost
		}
	}
	return finals
}

// publish records the new final models, marking changes and collecting rejection events.
func (t *Tracker) publish(finals map[ServiceKey]*Service) []rejectionEvent {
	keys := make([]ServiceKey, 0, len(finals))
	for k := range finals {
		keys = append(keys, k)
	}
	sortKeys(keys)
	var events []rejectionEvent
	for _, k := range keys {
		ts := t.services[k]
		if ts == nil {
			continue
		}
		final := finals[k]
		if !reflect.DeepEqual(final, ts.final) {
			t.changed[k] = true
			t.markPending()
			t.latency.received(k, t.cfg.Now)
			if oldR, newR := rejectionOf(ts.final), rejectionOf(final); !reflect.DeepEqual(oldR, newR) {
				events = append(events, rejectionEvent{k, newR})
			}
			ts.final, ts.refused = final, nil
		}
		if !ts.held() && ts.final == nil {
			delete(t.services, k)
		}
	}
	return events
}

// RecordKernelRefusal records that the kernel refused tried, the model of key that the sync loop
// tried to program: the Service is published as rejected with r, so it is reported like any
// rejection (OnRejection, Snapshot, Events), until it changes or RetryRefused. It is not marked
// changed: the sync loop has already taken it out. A tried model that is no longer current (the
// Service changed meanwhile) is left alone: its new version is still to be tried.
func (t *Tracker) RecordKernelRefusal(key ServiceKey, tried *Service, r *Rejection) {
	t.update(func() []rejectionEvent {
		ts := t.services[key]
		if ts == nil || ts.final == nil || ts.final != tried || tried.Rejected != nil {
			return nil
		}
		ts.refused, ts.final = tried, &Service{Key: key, Rejected: r}
		return []rejectionEvent{{key, r}}
	})
}

// RetryRefused publishes again the accepted model of every Service the kernel refused, marked
// changed, so that the next sync tries them again (the sync loop calls it on a full resync).
func (t *Tracker) RetryRefused() {
	t.update(func() []rejectionEvent {
		var events []rejectionEvent
		for k, ts := range t.services {
			if ts.refused != nil {
				ts.final, ts.refused = ts.refused, nil
				t.changed[k] = true
				t.markPending()
				t.latency.received(k, t.cfg.Now)
				events = append(events, rejectionEvent{k, nil})
			}
		}
		sort.Slice(events, func(i, j int) bool { return events[i].key.String() < events[j].key.String() })
		return events
	})
}

// rejectionOf is what OnRejection reports of a model: its rejection, or what it withholds.
func rejectionOf(s *Service) *Rejection {
	if s == nil {
		return nil
	}
	if s.Rejected != nil {
		return s.Rejected
	}
	return s.Withheld
}

func sortKeys(keys []ServiceKey) {
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Namespace != keys[j].Namespace {
			return keys[i].Namespace < keys[j].Namespace
		}
		return keys[i].Name < keys[j].Name
	})
}

// Changes is what changed since the previous TakeChanges.
type Changes struct {
	// Services whose model changed, appeared or disappeared, sorted.
	Services []ServiceKey
	// Node is true when the node's addresses or labels changed.
	Node bool
	// Since is when the oldest of these changes was recorded (zero if there are none), for
	// /healthz, and for the network-programming latency of a change no Service carries (the
	// Node's).
	Since time.Time
	// Started maps each Service in Services to when its change began, one entry per change
	// measured, for the network-programming latency: see Tracker.TakeChanges.
	Started map[ServiceKey][]time.Time
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Services) == 0 && !c.Node }

// TakeChanges returns and clears the recorded changes. Changes.Started follows upstream
// kube-proxy: the endpoints.kubernetes.io/last-change-trigger-time of every EndpointSlice
// update that changed the Service (the time the EndpointSlice controller saw the Pod or
// Service change), except trigger times older than the Tracker, which would measure the time
// nftproxy was not running; a Service with none (manifest mode without the annotation, a change
// of the Service object, a deleted slice) has the time the Tracker recorded its change.
func (t *Tracker) TakeChanges() Changes {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := Changes{Node: t.nodeChanged, Since: t.since, Started: t.latency.take(t.changed)}
	for k := range t.changed {
		c.Services = append(c.Services, k)
	}
	sortKeys(c.Services)
	t.changed = map[ServiceKey]bool{}
	t.nodeChanged = false
	t.since = time.Time{}
	t.counts.taken()
	return c
}

// Pending is how many Services changed since the last TakeChanges (a gauge of work waiting for
// the sync loop).
func (t *Tracker) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.changed)
}

// PendingSince returns when the oldest change not yet taken was recorded, or zero; /healthz
// uses it to report a sync loop that has fallen behind.
func (t *Tracker) PendingSince() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.since
}

// Snapshot is the whole current model. Its Services and Node are shared with the Tracker and
// must not be modified; a changed Service gets a new *Service, so a held snapshot stays valid.
type Snapshot struct {
	// Services holds every handled Service, rejected ones included (with no ports).
	Services map[ServiceKey]*Service
	// Node is nil until the node has been seen.
	Node *Node
}

// Sorted returns the Services ordered by key, for deterministic output.
func (s Snapshot) Sorted() []*Service {
	keys := make([]ServiceKey, 0, len(s.Services))
	for k := range s.Services {
		keys = append(keys, k)
	}
	sortKeys(keys)
	out := make([]*Service, len(keys))
	for i, k := range keys {
		out[i] = s.Services[k]
	}
	return out
}

// Snapshot returns the current model.
func (t *Tracker) Snapshot() Snapshot {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := Snapshot{Services: make(map[ServiceKey]*Service, len(t.services)), Node: t.nodeMdl}
	for k, ts := range t.services {
		if ts.final != nil {
			s.Services[k] = ts.final
		}
	}
	return s
}

// Service returns the current model of one Service, or nil if it is unknown or ignored; a
// partial sync reads the keys from TakeChanges this way.
func (t *Tracker) Service(key ServiceKey) *Service {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ts := t.services[key]; ts != nil {
		return ts.final
	}
	return nil
}
