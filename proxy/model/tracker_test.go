package model

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) record(k ServiceKey, rej *Rejection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rej == nil {
		r.events = append(r.events, k.String()+" ok")
		return
	}
	if rej.Partial {
		r.events = append(r.events, k.String()+" "+rej.Reason+" (partial)")
		return
	}
	r.events = append(r.events, k.String()+" "+rej.Reason)
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

func newTestTracker(rec *recorder) *Tracker {
	now := t0
	return NewTracker(TrackerConfig{NodeName: "n1", Logger: logr.Discard(), OnRejection: rec.record,
		Now: func() time.Time { now = now.Add(time.Second); return now }})
}

func created(age int) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.CreationTimestamp = metav1.NewTime(t0.Add(time.Duration(age) * time.Minute))
	}
}

// onIP gives a Service a cluster IP of its own and a shared external IP, so only its external
// ports can conflict with others.
func onIP(clusterIP, externalIP string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.ClusterIP, s.Spec.ClusterIPs = clusterIP, []string{clusterIP}
		s.Spec.ExternalIPs = []string{externalIP}
	}
}

func keyOf(name string) ServiceKey { return ServiceKey{Namespace: "ns", Name: name} }

func TestTrackerServiceAndEndpoints(t *testing.T) {
	rec := &recorder{}
	tr := newTestTracker(rec)
	tr.UpsertService(svcFixture("a"))
	tr.UpsertEndpointSlice(sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{slicePortFixture("http", 8080)}, epFixture{addr: "10.244.0.1"}))

	ch := tr.TakeChanges()
	if want := []ServiceKey{keyOf("a")}; !reflect.DeepEqual(ch.Services, want) || ch.Node {
		t.Fatalf("changes = %+v; want services %v, no node", ch, want)
	}
	if want := t0.Add(2 * time.Second); !ch.Since.Equal(want) { // the clock's first tick is the Tracker's start
		t.Fatalf("changes since = %v; want %v (the first change)", ch.Since, want)
	}
	snap := tr.Snapshot()
	got := snap.Services[keyOf("a")]
	if got == nil || len(got.Ports) != 1 || len(got.Ports[0].Endpoints) != 1 || got.Ports[0].Endpoints[0].Port != 8080 {
		t.Fatalf("snapshot service = %+v; want one port with endpoint 10.244.0.1:8080", got)
	}

	t.Run("unchanged upsert records nothing", func(t *testing.T) {
		tr.UpsertService(svcFixture("a"))
		if ch := tr.TakeChanges(); !ch.Empty() || !ch.Since.IsZero() {
			t.Fatalf("changes = %+v; want none", ch)
		}
	})
	t.Run("slice relabelled moves endpoints", func(t *testing.T) {
		tr.UpsertService(svcFixture("b", onIP("10.96.0.11", "192.0.2.99")))
		tr.TakeChanges()
		tr.UpsertEndpointSlice(sliceFixture("a-1", "b", discoveryv1.AddressTypeIPv4,
			[]discoveryv1.EndpointPort{slicePortFixture("http", 8080)}, epFixture{addr: "10.244.0.1"}))
		ch := tr.TakeChanges()
		if want := []ServiceKey{keyOf("a"), keyOf("b")}; !reflect.DeepEqual(ch.Services, want) {
			t.Fatalf("changed = %v; want %v", ch.Services, want)
		}
		if n := len(tr.Service(keyOf("a")).Ports[0].Endpoints); n != 0 {
			t.Fatalf("a has %d endpoints; want 0", n)
		}
		if n := len(tr.Service(keyOf("b")).Ports[0].Endpoints); n != 1 {
			t.Fatalf("b has %d endpoints; want 1", n)
		}
	})
	t.Run("delete slice and service", func(t *testing.T) {
		tr.DeleteEndpointSlice("ns", "a-1")
		tr.DeleteService(keyOf("a"))
		ch := tr.TakeChanges()
		if want := []ServiceKey{keyOf("a"), keyOf("b")}; !reflect.DeepEqual(ch.Services, want) {
			t.Fatalf("changed = %v; want %v", ch.Services, want)
		}
		if s := tr.Service(keyOf("a")); s != nil {
			t.Fatalf("deleted service still has model %+v", s)
		}
	})
	if ev := rec.take(); len(ev) != 0 {
		t.Fatalf("rejection events = %v; want none", ev)
	}
}

func TestTrackerConflicts(t *testing.T) {
	rec := &recorder{}
	tr := newTestTracker(rec)
	// a (oldest) claims 80 on 192.0.2.1; b claims 80-90 there too; c claims 85 on 192.0.2.1
	// with port 85 only overlapping b. So a wins, b loses its range on 192.0.2.1 (its ClusterIP
	// keeps it), c wins because b does not hold 192.0.2.1 any more.
	rangeB := []func(*corev1.Service){created(2), onIP("10.96.0.12", "192.0.2.1"),
		withPorts(tcpPort("http", 80, intstr.IntOrString{})), annotate(annotation.PortRangesKey, "http=80-90")}
	tr.UpsertService(svcFixture("b", rangeB...))
	tr.UpsertService(svcFixture("c", created(3), onIP("10.96.0.13", "192.0.2.1"), withPorts(tcpPort("x", 85, intstr.FromInt32(85)))))
	if ev := rec.take(); len(ev) != 1 || ev[0] != "ns/c ServiceConflict (partial)" {
		t.Fatalf("events = %v; want [ns/c ServiceConflict (partial)]", ev)
	}
	tr.TakeChanges()
	addA := func() { tr.UpsertService(svcFixture("a", created(1), onIP("10.96.0.11", "192.0.2.1"))) }

	steps := []struct {
		name    string
		do      func()
		events  []string
		changed []string
		msg     string // substring of what b withholds, if it withholds something
	}{
		{name: "older a takes the port from b, freeing c", do: addA,
			events: []string{"ns/b ServiceConflict (partial)", "ns/c ok"}, changed: []string{"a", "b", "c"},
			msg: `port "http" (TCP on 192.0.2.1, ports 80-90) overlaps port "http" (port 80) of service ns/a`},
		{name: "resync of b reports nothing", do: func() {
			tr.UpsertService(svcFixture("b", append(rangeB, func(s *corev1.Service) { s.ResourceVersion = "2" })...))
		}, msg: "service ns/a"},
		{name: "deleting a gives b its range back and c loses", do: func() { tr.DeleteService(keyOf("a")) },
			events: []string{"ns/b ok", "ns/c ServiceConflict (partial)"}, changed: []string{"a", "b", "c"}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.do()
			if ev := rec.take(); !reflect.DeepEqual(ev, st.events) {
				t.Fatalf("events = %v; want %v", ev, st.events)
			}
			var names []string
			for _, k := range tr.TakeChanges().Services {
				names = append(names, k.Name)
			}
			if !reflect.DeepEqual(names, st.changed) {
				t.Fatalf("changed = %v; want %v", names, st.changed)
			}
			if st.msg != "" {
				b := tr.Service(keyOf("b"))
				if b.Rejected != nil || b.Withheld == nil || !b.Withheld.Partial || !strings.Contains(b.Withheld.Message, st.msg) {
					t.Fatalf("b = %+v; want it served, withholding with a message containing %q", b, st.msg)
				}
				if p := b.Ports[0]; len(p.ExternalIPs) != 0 || len(p.ClusterIPs) != 1 {
					t.Fatalf("b's port = %+v; want its ClusterIP and not the contested external IP", p)
				}
			}
		})
	}
}

// TestTrackerConflictEvents: a Service that lost a port on a shared address is reported once
// (partial), keeps being served with its endpoints as they change (no new report), and gets the
// address back when the older Service goes.
func TestTrackerConflictEvents(t *testing.T) {
	rec := &recorder{}
	tr := newTestTracker(rec)
	tr.UpsertService(svcFixture("b", created(2), onIP("10.96.0.12", "192.0.2.1")))
	tr.UpsertService(svcFixture("a", created(1), onIP("10.96.0.11", "192.0.2.1")))
	if ev, want := rec.take(), []string{"ns/b ServiceConflict (partial)"}; !reflect.DeepEqual(ev, want) {
		t.Fatalf("events = %v; want %v", ev, want)
	}
	tr.UpsertService(svcFixture("b", created(2), onIP("10.96.0.12", "192.0.2.1"), func(s *corev1.Service) { s.ResourceVersion = "9" }))
	if ev := rec.take(); len(ev) != 0 {
		t.Fatalf("events after resync = %v; want none", ev)
	}
	tr.TakeChanges()
	tr.UpsertEndpointSlice(sliceFixture("b-1", "b", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{slicePortFixture("http", 8080)}, epFixture{addr: "10.244.0.1"}))
	if ev, ch := rec.take(), tr.TakeChanges(); len(ev) != 0 || !reflect.DeepEqual(ch.Services, []ServiceKey{keyOf("b")}) {
		t.Fatalf("endpoint change of partly served b: events %v, changes %+v; want no event, b changed", ev, ch)
	}
	b := tr.Service(keyOf("b"))
	if b.Withheld == nil || b.Withheld.Reason != ReasonServiceConflict || len(b.Ports[0].ExternalIPs) != 0 || len(b.Ports[0].Endpoints) != 1 {
		t.Fatalf("b after endpoint change = %+v; want still withholding the external IP (%s), with the new endpoint", b, ReasonServiceConflict)
	}
	tr.DeleteService(keyOf("a"))
	if ev, want := rec.take(), []string{"ns/b ok"}; !reflect.DeepEqual(ev, want) {
		t.Fatalf("events after delete = %v; want %v", ev, want)
	}
	if p := tr.Service(keyOf("b")).Ports[0]; len(p.Endpoints) != 1 || len(p.ExternalIPs) != 1 {
		t.Fatalf("b's port after a is gone = %+v; want the external IP back and the one endpoint from b-1", p)
	}
}

func TestTrackerNodePortConflict(t *testing.T) {
	rec := &recorder{}
	tr := newTestTracker(rec)
	np := func(name string, age int, nodePort int32) *corev1.Service {
		return svcFixture(name, created(age), onIP(fmt.Sprintf("10.96.0.%d", age), fmt.Sprintf("192.0.2.%d", age)),
			func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[0].NodePort = nodePort })
	}
	tr.UpsertService(np("a", 1, 30080))
	tr.UpsertService(np("b", 2, 30080))
	tr.UpsertService(np("c", 3, 30081))
	if ev, want := rec.take(), []string{"ns/b ServiceConflict"}; !reflect.DeepEqual(ev, want) {
		t.Fatalf("events = %v; want %v", ev, want)
	}
	if msg := tr.Service(keyOf("b")).Rejected.Message; !strings.Contains(msg, "TCP node ports") {
		t.Fatalf("message = %q; want it to mention node ports", msg)
	}
	// A lost node port rejects the whole Service (the API server never gives one twice); an
	// endpoint change of the rejected Service changes nothing and reports nothing.
	tr.TakeChanges()
	tr.UpsertEndpointSlice(sliceFixture("b-1", "b", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{slicePortFixture("http", 8080)}, epFixture{addr: "10.244.0.1"}))
	if ev, ch := rec.take(), tr.TakeChanges(); len(ev) != 0 || !ch.Empty() {
		t.Fatalf("endpoint change of rejected b: events %v, changes %+v; want none", ev, ch)
	}
	if b := tr.Service(keyOf("b")); b.Rejected == nil || b.Rejected.Reason != ReasonServiceConflict {
		t.Fatalf("b after endpoint change = %+v; want still rejected, %s", b, ReasonServiceConflict)
	}
}

func TestTrackerProxyNameAndNode(t *testing.T) {
	tr := NewTracker(TrackerConfig{NodeName: "n1", ProxyName: "nftproxy", Logger: logr.Discard()})
	labelled := func(s *corev1.Service) { s.Labels = map[string]string{annotation.ServiceProxyNameLabel: "nftproxy"} }
	tr.UpsertService(svcFixture("mine", labelled))
	tr.UpsertService(svcFixture("theirs", onIP("10.96.0.99", "192.0.2.99")))
	tr.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}})
	tr.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}, {Type: corev1.NodeHostName, Address: "n1"},
			{Type: corev1.NodeExternalIP, Address: "2001:db8::1"}}}})
	ch := tr.TakeChanges()
	if want := []ServiceKey{keyOf("mine")}; !reflect.DeepEqual(ch.Services, want) || !ch.Node {
		t.Fatalf("changes = %+v; want %v and node", ch, want)
	}
	snap := tr.Snapshot()
	if _, ok := snap.Services[keyOf("theirs")]; ok || len(snap.Services) != 1 {
		t.Fatalf("snapshot services = %v; want only ns/mine", snap.Sorted())
	}
	if want := []string{"10.0.0.1", "2001:db8::1"}; snap.Node == nil || fmt.Sprint(snap.Node.Addresses) != fmt.Sprint(want) ||
		snap.Node.Zone() != "z1" {
		t.Fatalf("node = %+v; want addresses %v zone z1", snap.Node, want)
	}
	tr.UpsertService(svcFixture("mine"))
	if ch := tr.TakeChanges(); fmt.Sprint(ch.Services) != "[ns/mine]" || tr.Service(keyOf("mine")) != nil {
		t.Fatalf("after label removal changes = %+v; want ns/mine removed", ch)
	}
}

func TestTrackerConcurrent(t *testing.T) {
	tr := NewTracker(TrackerConfig{Logger: logr.Discard()})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				name := fmt.Sprintf("s%d-%d", g, i)
				tr.UpsertService(svcFixture(name, onIP(fmt.Sprintf("10.96.%d.%d", g, i+1), fmt.Sprintf("192.0.%d.%d", g, i+1))))
				tr.UpsertEndpointSlice(sliceFixture(name+"-1", name, discoveryv1.AddressTypeIPv4,
					[]discoveryv1.EndpointPort{slicePortFixture("http", 8080)}, epFixture{addr: "10.244.0.1"}))
				if i%2 == 0 {
					tr.DeleteService(keyOf(name))
				}
				_ = tr.Snapshot()
			}
		}(g)
	}
	wg.Wait()
	if got, want := len(tr.Snapshot().Services), 4*25; got != want {
		t.Fatalf("services = %d; want %d", got, want)
	}
}

// TestTrackerSliceLifecycle: deleting one of a Service's EndpointSlices leaves the others
// served and updatable, and a slice deleted and created again as it was is served again.
func TestTrackerSliceLifecycle(t *testing.T) {
	tr := newTestTracker(&recorder{})
	tr.UpsertService(svcFixture("a"))
	ports := []discoveryv1.EndpointPort{slicePortFixture("http", 8080)}
	slice := func(name, ip string) *discoveryv1.EndpointSlice {
		return sliceFixture(name, "a", discoveryv1.AddressTypeIPv4, ports, epFixture{addr: ip})
	}
	served := func() string {
		var out []string
		for _, ep := range tr.Service(keyOf("a")).Ports[0].Endpoints {
			out = append(out, ep.Addr.String())
		}
		return strings.Join(out, " ")
	}
	steps := []struct {
		name string
		do   func()
		want string
	}{
		{"three slices", func() {
			tr.UpsertEndpointSlice(slice("a-1", "10.244.0.1"))
			tr.UpsertEndpointSlice(slice("a-2", "10.244.0.2"))
			tr.UpsertEndpointSlice(slice("a-3", "10.244.0.3"))
		}, "10.244.0.1 10.244.0.2 10.244.0.3"},
		{"the first deleted", func() { tr.DeleteEndpointSlice("ns", "a-1") }, "10.244.0.2 10.244.0.3"},
		{"another updated", func() { tr.UpsertEndpointSlice(slice("a-2", "10.244.0.12")) }, "10.244.0.3 10.244.0.12"},
		{"one added", func() { tr.UpsertEndpointSlice(slice("a-4", "10.244.0.4")) }, "10.244.0.3 10.244.0.4 10.244.0.12"},
		{"the deleted one created again", func() { tr.UpsertEndpointSlice(slice("a-1", "10.244.0.1")) },
			"10.244.0.1 10.244.0.3 10.244.0.4 10.244.0.12"},
		{"deleted and created again unchanged", func() {
			tr.DeleteEndpointSlice("ns", "a-1")
			tr.UpsertEndpointSlice(slice("a-1", "10.244.0.1"))
		}, "10.244.0.1 10.244.0.3 10.244.0.4 10.244.0.12"},
	}
	for _, s := range steps {
		s.do()
		if got := served(); got != s.want {
			t.Fatalf("after %s: endpoints %s; want %s", s.name, got, s.want)
		}
	}
}

// TestTrackerNodeAgain: a Node deleted and given again as it was (a manifest's node file
// removed and restored) is the node again, and a change of the node alone is pending from when
// it was recorded (/healthz and the programming latency read it).
func TestTrackerNodeAgain(t *testing.T) {
	tr := newTestTracker(&recorder{})
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}}
	tr.UpsertNode(node)
	if since := tr.PendingSince(); since.IsZero() {
		t.Fatalf("after the node was seen: PendingSince is zero; want the time of the change")
	}
	if ch := tr.TakeChanges(); !ch.Node || ch.Since.IsZero() {
		t.Fatalf("changes = %+v; want the node, since the time it changed", ch)
	}
	if ch := tr.TakeChanges(); !ch.Empty() {
		t.Fatalf("changes taken again = %+v; want none (the node change was taken)", ch)
	}
	tr.DeleteNode("n1")
	if n := tr.Snapshot().Node; n != nil {
		t.Fatalf("after DeleteNode: node %+v; want none", n)
	}
	tr.UpsertNode(node.DeepCopy())
	if n := tr.Snapshot().Node; n == nil || fmt.Sprint(n.Addresses) != "[10.0.0.1]" {
		t.Fatalf("after the node came back: node %+v; want n1 with 10.0.0.1", n)
	}
}

// TestTrackerForgetsClaims: the index of port claims holds only what the Services claim now: a
// moved Service's old address and a deleted Service's claims leave it, or the index would
// grow with every change for the life of the process. So for the index of addresses (which
// Services a node-address change concerns) and for the tracked Services themselves.
func TestTrackerForgetsClaims(t *testing.T) {
	tr := newTestTracker(&recorder{})
	tr.UpsertService(svcFixture("a", onIP("10.96.0.61", "192.0.2.61")))
	tr.UpsertService(svcFixture("b", onIP("10.96.0.62", "192.0.2.62")))
	tr.UpsertService(svcFixture("a", onIP("10.96.0.61", "192.0.2.63")))
	for k := range tr.claims {
		if k.addr == addr("192.0.2.61") {
			t.Fatalf("claims at %v remain after the Service moved to 192.0.2.63", k)
		}
	}
	// A Service its source refuses (manifest mode's validation) names no address either.
	c := svcFixture("c", onIP("10.96.0.64", "192.0.2.64"))
	tr.UpsertService(c)
	tr.RejectService(c, reject(keyOf("c"), ReasonInvalidPort, "refused by the source"))
	if _, ok := tr.byAddr[addr("192.0.2.64")]; ok {
		t.Fatalf("a refused Service's address 192.0.2.64 is still indexed")
	}
	tr.DeleteService(keyOf("a"))
	tr.DeleteService(keyOf("b"))
	tr.DeleteService(keyOf("c"))
	if len(tr.claims) != 0 || len(tr.byAddr) != 0 || len(tr.services) != 0 {
		t.Fatalf("after every Service was deleted: %d claim keys, %d addresses indexed, %d Services tracked; want none",
			len(tr.claims), len(tr.byAddr), len(tr.services))
	}
}

// TestTrackerLogsWarnings: problems that do not reject a Service (endpoints skipped for a bad
// address) reach the log once while they last, not on every change of the Service, and again
// when the Service comes back after it was deleted or handled by another proxy.
func TestTrackerLogsWarnings(t *testing.T) {
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	tr := NewTracker(TrackerConfig{NodeName: "n1", Logger: log})
	ports := []discoveryv1.EndpointPort{slicePortFixture("http", 8080)}
	bad := sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4, ports, epFixture{addr: "nope"}, epFixture{addr: "10.244.0.1"})
	more := sliceFixture("a-2", "a", discoveryv1.AddressTypeIPv4, ports, epFixture{addr: "10.244.0.2"})
	steps := []struct {
		name string
		do   func()
		want int // lines logged so far
	}{
		{"a Service with a bad endpoint address", func() { tr.UpsertEndpointSlice(bad); tr.UpsertService(svcFixture("a")) }, 1},
		{"another slice, same problem", func() { tr.UpsertEndpointSlice(more) }, 1},
		{"the Service deleted and back", func() { tr.DeleteService(keyOf("a")); tr.UpsertService(svcFixture("a")) }, 2},
		{"handed to another proxy and back", func() {
			tr.UpsertService(svcFixture("a", func(s *corev1.Service) {
				s.Labels = map[string]string{annotation.ServiceProxyNameLabel: "other"}
			}))
			tr.UpsertService(svcFixture("a"))
		}, 3},
	}
	for _, s := range steps {
		s.do()
		if len(lines) != s.want {
			t.Fatalf("after %s: logged %q; want %d line(s)", s.name, lines, s.want)
		}
	}
	if !strings.Contains(lines[0], "EndpointSlice ns/a-1: skipped 1 endpoint(s)") || !strings.Contains(lines[0], `"service"="ns/a"`) {
		t.Fatalf("logged %q; want the Service and the skipped endpoint", lines[0])
	}
}

// TestSnapshotSorted: Sorted lists every Service of the snapshot by namespace, then name (the
// order a full sync programs and a rendered model prints them in).
func TestSnapshotSorted(t *testing.T) {
	svc := func(ns, name string) *Service { return &Service{Key: ServiceKey{Namespace: ns, Name: name}} }
	s := Snapshot{Services: map[ServiceKey]*Service{}}
	for _, x := range []*Service{svc("b", "a"), svc("a", "z"), svc("a", "b"), svc("c", "c"), svc("a", "a")} {
		s.Services[x.Key] = x
	}
	var got []string
	for _, x := range s.Sorted() {
		got = append(got, x.Key.String())
	}
	if want := []string{"a/a", "a/b", "a/z", "b/a", "c/c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Sorted = %v; want %v", got, want)
	}
}
