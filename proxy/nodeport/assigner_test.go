package nodeport

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/manifest"
)

// dyn in a want means "some port of the dynamic band"; shared ports are checked separately.
const dyn = -1

type wantSvc struct {
	nodePorts []int32
	hc        int32
	blocks    string // the node-port-ranges annotation; "" means absent
}

type wantProblem struct {
	svc, port string
	is        error
}

func TestAssign(t *testing.T) {
	const rtp = annotation.PortRangesKey
	const npr = annotation.NodePortRangesKey
	cases := []struct {
		name     string
		svcs     []*corev1.Service
		want     map[string]wantSvc
		problems []wantProblem
	}{
		{
			name: "missing node ports are allocated from the dynamic band",
			svcs: []*corev1.Service{newSvc("web", 0, port("http", "TCP", 80, 0), port("https", "TCP", 443, 0))},
			want: map[string]wantSvc{"web": {nodePorts: []int32{dyn, dyn}}},
		},
		{
			name: "explicit node ports are reserved as they are, in either band",
			svcs: []*corev1.Service{newSvc("web", 0, port("http", "TCP", 80, 30005), port("https", "TCP", 443, 32000))},
			want: map[string]wantSvc{"web": {nodePorts: []int32{30005, 32000}}},
		},
		{
			name: "TCP and UDP of one port number share one node port",
			svcs: []*corev1.Service{newSvc("dns", 0, port("tcp", "TCP", 53, 0), port("udp", "UDP", 53, 0))},
			want: map[string]wantSvc{"dns": {nodePorts: []int32{dyn, dyn}}},
		},
		{
			name: "ClusterIP Services are left alone",
			svcs: []*corev1.Service{newSvc("c", 0, typ(corev1.ServiceTypeClusterIP), port("http", "TCP", 80, 0))},
			want: map[string]wantSvc{"c": {nodePorts: []int32{0}}},
		},
		{
			name: "LoadBalancer with allocateLoadBalancerNodePorts false gets none, explicit ones still count",
			svcs: []*corev1.Service{
				newSvc("lb", 0, allocateLB(false), port("http", "TCP", 80, 0), port("https", "TCP", 443, 30443)),
			},
			want: map[string]wantSvc{"lb": {nodePorts: []int32{0, 30443}}},
		},
		{
			name: "externalTrafficPolicy Local gets a health-check node port, even without node ports",
			svcs: []*corev1.Service{
				newSvc("lb", 0, allocateLB(false), local(0), port("http", "TCP", 80, 0)),
				newSvc("lb2", 1, allocateLB(true), local(30999), port("http", "TCP", 80, 0)),
				newSvc("np", 2, local(0), port("http", "TCP", 80, 0)), // NodePort type: no health check port
			},
			want: map[string]wantSvc{
				"lb":  {nodePorts: []int32{0}, hc: dyn},
				"lb2": {nodePorts: []int32{dyn}, hc: 30999},
				"np":  {nodePorts: []int32{dyn}},
			},
		},
		{
			name: "two Services claiming one static port: the older keeps it, the other is served without it",
			svcs: []*corev1.Service{
				newSvc("young", 5, port("http", "TCP", 80, 30080), port("dns", "UDP", 53, 0)),
				newSvc("old", 1, port("http", "TCP", 80, 30080)),
				newSvc("other", 3, port("http", "TCP", 80, 30081)),
			},
			want: map[string]wantSvc{
				"old":   {nodePorts: []int32{30080}},
				"young": {nodePorts: []int32{0, dyn}},
				"other": {nodePorts: []int32{30081}},
			},
			problems: []wantProblem{{"default/young", "http", allocator.ErrAllocated}},
		},
		{
			name:     "an explicit node port outside the range is refused",
			svcs:     []*corev1.Service{newSvc("web", 0, port("http", "TCP", 80, 8080))},
			want:     map[string]wantSvc{"web": {nodePorts: []int32{0}}},
			problems: []wantProblem{{"default/web", "http", allocator.ErrOutOfRange}},
		},
		{
			name: "a range Service gets its own range as node-port block, and no single node port",
			svcs: []*corev1.Service{newSvc("rtp", 0, annotate(rtp, "rtp=16384-16393"),
				port("rtp", "UDP", 16384, 0), port("sip", "UDP", 5060, 0))},
			want: map[string]wantSvc{"rtp": {nodePorts: []int32{0, dyn}, blocks: "rtp=16384-16393"}},
		},
		{
			name: "a requested identity block is kept",
			svcs: []*corev1.Service{newSvc("rtp", 0, annotate(rtp, "rtp=16384-16393"), annotate(npr, "rtp=16384-16393"),
				port("rtp", "UDP", 16384, 0))},
			want: map[string]wantSvc{"rtp": {nodePorts: []int32{0}, blocks: "rtp=16384-16393"}},
		},
		{
			name: "a shifted block is refused and replaced by the identity block, as the cluster controller does",
			svcs: []*corev1.Service{newSvc("rtp", 0, annotate(rtp, "rtp=16384-16393"), annotate(npr, "rtp=20000-20009"),
				port("rtp", "UDP", 16384, 0))},
			want:     map[string]wantSvc{"rtp": {nodePorts: []int32{0}, blocks: "rtp=16384-16393"}},
			problems: []wantProblem{{"default/rtp", "rtp", policy.ErrShiftedBlock}},
		},
		{
			name: "a shifted block is refused and removed where no block may be allocated (KEP-1864)",
			svcs: []*corev1.Service{newSvc("rtp", 0, allocateLB(false), annotate(rtp, "rtp=16384-16393"),
				annotate(npr, "rtp=20000-20009"), port("rtp", "UDP", 16384, 0))},
			want:     map[string]wantSvc{"rtp": {nodePorts: []int32{0}}},
			problems: []wantProblem{{"default/rtp", "rtp", policy.ErrShiftedBlock}},
		},
		{
			name: "two Services with the same range: the older gets the block",
			svcs: []*corev1.Service{
				newSvc("b", 2, annotate(rtp, "rtp=16384-16393"), port("rtp", "UDP", 16384, 0)),
				newSvc("a", 1, annotate(rtp, "rtp=16390-16399"), port("rtp", "UDP", 16390, 0)),
			},
			want: map[string]wantSvc{
				"a": {nodePorts: []int32{0}, blocks: "rtp=16390-16399"},
				"b": {nodePorts: []int32{0}},
			},
			problems: []wantProblem{{"default/b", "rtp", allocator.ErrAllocated}},
		},
		{
			name:     "a block reaching into the node-port range is refused",
			svcs:     []*corev1.Service{newSvc("rtp", 0, annotate(rtp, "rtp=16384-32767"), port("rtp", "UDP", 16384, 0))},
			want:     map[string]wantSvc{"rtp": {nodePorts: []int32{0}}},
			problems: []wantProblem{{"default/rtp", "rtp", allocator.ErrOutOfRange}},
		},
		{
			name: "LoadBalancer with allocateLoadBalancerNodePorts false gets no block",
			svcs: []*corev1.Service{newSvc("rtp", 0, allocateLB(false), annotate(rtp, "rtp=16384-16393"), port("rtp", "UDP", 16384, 0))},
			want: map[string]wantSvc{"rtp": {nodePorts: []int32{0}}},
		},
		{
			// KEP-2610: all-ports never gets node ports (the proxies never program them); its
			// health-check node port is served (the load balancer needs it) and still given.
			name: "an all-ports LoadBalancer gets no node ports, only its health-check node port",
			svcs: []*corev1.Service{newSvc("any", 0, allocateLB(true), local(0), annotate(annotation.AllPortsKey, "true"),
				port("tcp", "TCP", 1, 0), port("udp", "UDP", 1, 0))},
			want: map[string]wantSvc{"any": {nodePorts: []int32{0, 0}, hc: dyn}},
		},
		{
			name: "TCP and UDP of one range share one block, as in the cluster controller",
			svcs: []*corev1.Service{newSvc("media", 0, annotate(rtp, "rtp-udp=16384-16393,rtp-tcp=16384-16393"),
				port("rtp-udp", "UDP", 16384, 0), port("rtp-tcp", "TCP", 16384, 0))},
			want: map[string]wantSvc{"media": {nodePorts: []int32{0, 0}, blocks: "rtp-udp=16384-16393,rtp-tcp=16384-16393"}},
		},
		{
			name: "a node-port-ranges value the model rejects is left as written",
			svcs: []*corev1.Service{newSvc("rtp", 0, annotate(rtp, "rtp=16384-16393"), annotate(npr, "rtp=16384-16390"),
				port("rtp", "UDP", 16384, 0))},
			want: map[string]wantSvc{"rtp": {nodePorts: []int32{0}, blocks: "rtp=16384-16390"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newAssigner(t, testNodePorts, "")
			probs := assign(t, a, c.svcs...)
			checkProblems(t, probs, c.problems)
			seen := map[int32]string{}
			for _, s := range c.svcs {
				w := c.want[s.Name]
				checkSvc(t, s, w)
				for _, n := range append(nodePorts(s), s.Spec.HealthCheckNodePort) {
					if owner, dup := seen[n]; n != 0 && dup && owner != s.Name {
						t.Errorf("node port %d given to %s and %s, want each port once", n, owner, s.Name)
					}
					seen[n] = s.Name
				}
			}
		})
	}
}

func checkSvc(t *testing.T, s *corev1.Service, w wantSvc) {
	t.Helper()
	got := nodePorts(s)
	if len(got) != len(w.nodePorts) {
		t.Fatalf("%s: got %d ports, want %d", s.Name, len(got), len(w.nodePorts))
	}
	dynBand := testNodePorts.DynamicBand()
	byNumber := map[int32]int32{}
	for i, g := range got {
		want := w.nodePorts[i]
		switch {
		case want == dyn && !dynBand.Contains(int(g)):
			t.Errorf("%s port %d: got node port %d, want one of the dynamic band %s", s.Name, i, g, dynBand)
		case want != dyn && g != want:
			t.Errorf("%s port %d: got node port %d, want %d", s.Name, i, g, want)
		}
		if g == 0 {
			continue
		}
		if prev, ok := byNumber[s.Spec.Ports[i].Port]; ok && prev != g {
			t.Errorf("%s: port number %d has node ports %d and %d, want one shared", s.Name, s.Spec.Ports[i].Port, prev, g)
		}
		byNumber[s.Spec.Ports[i].Port] = g
	}
	switch hc := s.Spec.HealthCheckNodePort; {
	case w.hc == dyn && !dynBand.Contains(int(hc)):
		t.Errorf("%s: got healthCheckNodePort %d, want one of %s", s.Name, hc, dynBand)
	case w.hc != dyn && hc != w.hc:
		t.Errorf("%s: got healthCheckNodePort %d, want %d", s.Name, hc, w.hc)
	}
	if got, ok := s.Annotations[annotation.NodePortRangesKey]; got != w.blocks || ok != (w.blocks != "") {
		t.Errorf("%s: got %s %q (present %v), want %q", s.Name, annotation.NodePortRangesKey, got, ok, w.blocks)
	}
}

func checkProblems(t *testing.T, got []Problem, want []wantProblem) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d problems %v, want %d %v", len(got), got, len(want), want)
		return
	}
	for i, w := range want {
		g := got[i]
		if g.Service != w.svc || g.Port != w.port || !errors.Is(g, w.is) {
			t.Errorf("problem %d: got %v, want Service %s port %q wrapping %v", i, g, w.svc, w.port, w.is)
		}
		if len(g.Error()) < 60 {
			t.Errorf("problem %d: got message %q, want one that explains", i, g.Error())
		}
	}
}

// TestKEP1864: setting allocateLoadBalancerNodePorts false takes nothing away that the Service
// still names; removing nodePort (or the block's entry) then releases it, so another Service
// can take it and the node does not program it; changing the type away from LoadBalancer
// releases everything; back to a LoadBalancer without allocation gets nothing new.
func TestKEP1864(t *testing.T) {
	a := newAssigner(t, testNodePorts, "")
	mk := func(opts ...svcOpt) *corev1.Service {
		base := []svcOpt{annotate(annotation.PortRangesKey, "rtp=16384-16393")}
		return newSvc("lb", 0, append(base, opts...)...)
	}
	unset := []svcOpt{port("http", "TCP", 80, 0), port("rtp", "UDP", 16384, 0)}
	first := mk(append(unset, allocateLB(true))...)
	assign(t, a, first)
	held := first.Spec.Ports[0].NodePort
	named := []svcOpt{allocateLB(false), port("http", "TCP", 80, held), port("rtp", "UDP", 16384, 0),
		annotate(annotation.NodePortRangesKey, "rtp=16384-16393")}
	steps := []struct {
		name   string
		svc    *corev1.Service
		others []*corev1.Service
		want   wantSvc
	}{
		{"allocation off, ports named: kept", mk(named...), nil,
			wantSvc{nodePorts: []int32{held, 0}, blocks: "rtp=16384-16393"}},
		{"still kept on the next load", mk(named...), nil,
			wantSvc{nodePorts: []int32{held, 0}, blocks: "rtp=16384-16393"}},
		// The port and the block are free at once: a younger Service asking for them gets them.
		{"allocation off, nodePort and the block entry removed: released", mk(append(unset, allocateLB(false))...),
			[]*corev1.Service{newSvc("other", 9, port("http", "TCP", 80, held)),
				newSvc("media", 9, annotate(annotation.PortRangesKey, "rtp=16384-16393"), port("rtp", "UDP", 16384, 0))},
			wantSvc{nodePorts: []int32{0, 0}}},
		{"type ClusterIP releases", mk(append(unset, typ(corev1.ServiceTypeClusterIP))...), nil, wantSvc{nodePorts: []int32{0, 0}}},
		{"LoadBalancer without allocation gets nothing new", mk(append(unset, allocateLB(false))...), nil, wantSvc{nodePorts: []int32{0, 0}}},
		{"allocation back on gets a port and the block", mk(append(unset, allocateLB(true))...), nil,
			wantSvc{nodePorts: []int32{dyn, 0}, blocks: "rtp=16384-16393"}},
	}
	for _, s := range steps {
		if probs := assign(t, a, append([]*corev1.Service{s.svc}, s.others...)...); len(probs) != 0 {
			t.Errorf("%s: got problems %v, want none", s.name, probs)
		}
		t.Run(s.name, func(t *testing.T) {
			checkSvc(t, s.svc, s.want)
			if ports, _, blocks, ok := a.Held("default/lb"); len(s.want.blocks) == 0 && ok && len(blocks) != 0 {
				t.Errorf("lb still holds ports %v, blocks %v; want no block", ports, blocks)
			}
			for _, o := range s.others {
				if o.Name == "other" && o.Spec.Ports[0].NodePort != held {
					t.Errorf("other: got node port %d, want %d released by lb", o.Spec.Ports[0].NodePort, held)
				}
				if o.Name == "media" && o.Annotations[annotation.NodePortRangesKey] != "rtp=16384-16393" {
					t.Errorf("media: got blocks %q, want rtp=16384-16393 released by lb", o.Annotations[annotation.NodePortRangesKey])
				}
			}
		})
	}
}

// TestAllPortsHoldsNoNodePort: an all-ports LoadBalancer (KEP-2610) takes no node port, not
// even one written in its file: with a one-port range, a younger NodePort Service gets the port.
func TestAllPortsHoldsNoNodePort(t *testing.T) {
	a := newAssigner(t, allocator.MustParseRange("30000-30000"), "")
	anyPorts := newSvc("any", 0, typ(corev1.ServiceTypeLoadBalancer), annotate(annotation.AllPortsKey, "true"),
		port("tcp", "TCP", 1, 0), port("udp", "UDP", 1, 30000))
	web := newSvc("web", 1, port("http", "TCP", 80, 0))
	if probs := assign(t, a, anyPorts, web); len(probs) != 0 {
		t.Errorf("got problems %v, want none", probs)
	}
	if got := web.Spec.Ports[0].NodePort; got != 30000 {
		t.Errorf("web: got node port %d, want 30000 (the all-ports Service holds none)", got)
	}
	if got := anyPorts.Spec.Ports[0].NodePort; got != 0 {
		t.Errorf("all-ports Service: got node port %d on its unset port, want 0", got)
	}
	if ports, hc, blocks, ok := a.Held("default/any"); ok {
		t.Errorf("all-ports Service holds ports %v, health check %d, blocks %v; want nothing", ports, hc, blocks)
	}
}

// TestSharedBlockKept: the block TCP and UDP of one range share is kept on the next load, and
// kept for a Service whose file failed to load, for both ports.
func TestSharedBlockKept(t *testing.T) {
	a := newAssigner(t, testNodePorts, "")
	mk := func() *corev1.Service {
		return newSvc("media", 0, annotate(annotation.PortRangesKey, "rtp-udp=16384-16393,rtp-tcp=16384-16393"),
			port("rtp-udp", "UDP", 16384, 0), port("rtp-tcp", "TCP", 16384, 0))
	}
	const want = "rtp-udp=16384-16393,rtp-tcp=16384-16393"
	for i := range 2 {
		s := mk()
		if probs := assign(t, a, s); len(probs) != 0 {
			t.Errorf("load %d: got problems %v, want none", i, probs)
		}
		if got := s.Annotations[annotation.NodePortRangesKey]; got != want {
			t.Errorf("load %d: got blocks %q, want %q", i, got, want)
		}
	}
	if _, err := a.Assign(objects(), []manifest.FileError{{File: "media.yaml"}}); err != nil {
		t.Fatal(err)
	}
	if _, _, blocks, _ := a.Held("default/media"); len(blocks) != 2 {
		t.Errorf("after a failed load: held blocks %v, want both ports' block kept", blocks)
	}
}

// TestHolderWins: a port held from an earlier load stays with its holder even when an older
// Service asks for it explicitly later, as the API server refuses the second create.
func TestHolderWins(t *testing.T) {
	one := allocator.MustParseRange("30000-30000")
	a := newAssigner(t, one, "")
	holder := newSvc("holder", 5, port("http", "TCP", 80, 0))
	assign(t, a, holder)
	if got := holder.Spec.Ports[0].NodePort; got != 30000 {
		t.Fatalf("holder: got node port %d, want 30000 (the only one)", got)
	}
	holder2 := newSvc("holder", 5, port("http", "TCP", 80, 0))
	older := newSvc("older", 1, port("http", "TCP", 80, 30000))
	probs := assign(t, a, holder2, older)
	checkProblems(t, probs, []wantProblem{{"default/older", "http", allocator.ErrAllocated}})
	if got := holder2.Spec.Ports[0].NodePort; got != 30000 {
		t.Errorf("holder after a rival: got node port %d, want 30000 kept", got)
	}
	// The holder goes away: the next load gives the port to the one that asked.
	older2 := newSvc("older", 1, port("http", "TCP", 80, 30000))
	if probs := assign(t, a, older2); len(probs) != 0 {
		t.Errorf("after the holder left: got problems %v, want none", probs)
	}
	if got := older2.Spec.Ports[0].NodePort; got != 30000 {
		t.Errorf("older after the holder left: got %d, want 30000", got)
	}
}

// TestFailedFileKeepsPorts: a Service whose file fails to load keeps its ports (the feeder keeps
// serving it), so a new Service cannot take them; deleting the file releases them.
func TestFailedFileKeepsPorts(t *testing.T) {
	two := allocator.MustParseRange("30000-30001")
	a := newAssigner(t, two, "")
	kept := newSvc("kept", 0, port("http", "TCP", 80, 0))
	assign(t, a, kept)
	keptPort := kept.Spec.Ports[0].NodePort

	b, c := newSvc("b", 1, port("http", "TCP", 80, 0)), newSvc("c", 2, port("http", "TCP", 80, 0))
	probs, err := assignWith(t, a, []manifest.FileError{{File: "kept.yaml"}}, b, c)
	if err != nil {
		t.Fatal(err)
	}
	checkProblems(t, probs, []wantProblem{{"default/c", "http", allocator.ErrFull}})
	if got := b.Spec.Ports[0].NodePort; got == keptPort || got == 0 {
		t.Errorf("b: got node port %d, want the free one (not %d, held by the failed file's Service)", got, keptPort)
	}
	if _, _, _, ok := a.Held("default/kept"); !ok {
		t.Errorf("kept: holds nothing after its file failed, want its port %d kept", keptPort)
	}

	// The file is gone for good (no error): its port is free again.
	c2 := newSvc("c", 2, port("http", "TCP", 80, 0))
	b2 := newSvc("b", 1, port("http", "TCP", 80, 0))
	if probs := assign(t, a, b2, c2); len(probs) != 0 {
		t.Errorf("after the file was deleted: got problems %v, want none", probs)
	}
	if got := c2.Spec.Ports[0].NodePort; got != keptPort {
		t.Errorf("c: got node port %d, want %d, released by the deleted Service", got, keptPort)
	}
}

// TestDeterministic: the result does not depend on the order Services are listed in.
func TestDeterministic(t *testing.T) {
	mk := func() []*corev1.Service {
		var out []*corev1.Service
		for i := range 6 {
			out = append(out, newSvc(fmt.Sprintf("s%d", i), i%3, port("http", "TCP", 80, 0), port("x", "UDP", 90, 0)))
		}
		out = append(out, newSvc("rival", 0, port("http", "TCP", 80, 30100)), newSvc("rival2", 1, port("http", "TCP", 80, 30100)))
		return out
	}
	a1 := newAssigner(t, testNodePorts, "")
	first := mk()
	p1 := assign(t, a1, first...)
	a2 := newAssigner(t, testNodePorts, "")
	second := mk()
	slices.Reverse(second)
	p2 := assign(t, a2, second...)
	byName := map[string][]int32{}
	for _, s := range first {
		byName[s.Name] = nodePorts(s)
	}
	for _, s := range second {
		if got, want := nodePorts(s), byName[s.Name]; !slices.Equal(got, want) {
			t.Errorf("%s: got %v listed in reverse, want %v as in order", s.Name, got, want)
		}
	}
	if len(p1) != 1 || len(p2) != 1 || p1[0].Service != p2[0].Service {
		t.Errorf("problems: got %v in reverse, want %v as in order (one, for the younger rival)", p2, p1)
	}
}

// recorder is an allocator.Observer for tests.
type recorder struct {
	allocated, failed map[allocator.Scope]int
	used, free        int
}

func (r *recorder) Counts(u, f int)                    { r.used, r.free = u, f }
func (r *recorder) Allocated(s allocator.Scope)        { r.allocated[s]++ }
func (r *recorder) AllocationFailed(s allocator.Scope) { r.failed[s]++ }

// TestObserver: new requests are counted once; ports kept from an earlier load are not counted
// again.
func TestObserver(t *testing.T) {
	rec := &recorder{allocated: map[allocator.Scope]int{}, failed: map[allocator.Scope]int{}}
	a, err := New(Config{NodePortRange: testNodePorts, Observer: rec}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	mk := func() []*corev1.Service {
		return []*corev1.Service{
			newSvc("a", 0, port("http", "TCP", 80, 30001), port("dns", "UDP", 53, 0)),
			newSvc("b", 1, port("http", "TCP", 80, 30001)),
		}
	}
	for round := range 2 {
		assign(t, a, mk()...)
		wantStaticFailed := round + 1 // b asks again on every load and is refused again
		if rec.allocated[allocator.ScopeStatic] != 1 || rec.allocated[allocator.ScopeDynamic] != 1 ||
			rec.failed[allocator.ScopeStatic] != wantStaticFailed {
			t.Errorf("load %d: got allocated %v failed %v, want static 1, dynamic 1, static failures %d",
				round+1, rec.allocated, rec.failed, wantStaticFailed)
		}
		if rec.used != 2 || rec.free != testNodePorts.Size()-2 {
			t.Errorf("load %d: got counts used %d free %d, want 2 and %d", round+1, rec.used, rec.free, testNodePorts.Size()-2)
		}
	}
}

func TestNewRefusesOverlappingRanges(t *testing.T) {
	cases := []struct {
		name      string
		nodePorts string
		blocks    string
		ok        bool
	}{
		{"disjoint", "30000-32767", "1024-29999", true},
		{"no block range", "30000-32767", "", true},
		{"overlap at the edge", "30000-32767", "20000-30000", false},
		{"blocks inside", "30000-32767", "31000-31100", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{NodePortRange: allocator.MustParseRange(c.nodePorts)}
			if c.blocks != "" {
				cfg.BlockRange = allocator.MustParseRange(c.blocks)
			}
			_, err := New(cfg, logr.Discard())
			if (err == nil) != c.ok {
				t.Errorf("New(%s, %s): got error %v, want ok %v", c.nodePorts, c.blocks, err, c.ok)
			}
		})
	}
}

// TestNoBlockRange: without a block range a range Service gets no block and each load says so.
func TestNoBlockRange(t *testing.T) {
	a, err := New(Config{NodePortRange: testNodePorts}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	s := newSvc("rtp", 0, annotate(annotation.PortRangesKey, "rtp=16384-16393"), port("rtp", "UDP", 16384, 0))
	checkProblems(t, assign(t, a, s), []wantProblem{{"default/rtp", "rtp", policy.ErrNoBlockRange}})
	checkSvc(t, s, wantSvc{nodePorts: []int32{0}})
}

// TestAssignKeepsObjectsStable: a reload hands the Assigner the same Service objects for files
// that did not change; the model must then be given the very objects of the last time (the
// Feeder skips those by identity): the Service itself when nothing is assigned to it, the same
// copy when its assignment is the same again, and a new copy only when the assignment changes.
func TestAssignKeepsObjectsStable(t *testing.T) {
	a := newAssigner(t, testNodePorts, "")
	plain := newSvc("plain", 0, port("http", "TCP", 80, 0))
	plain.Spec.Type = corev1.ServiceTypeClusterIP
	np := newSvc("np", 1, port("http", "TCP", 80, 0))
	load := func() []*corev1.Service {
		t.Helper()
		objs := objects(plain, np)
		if _, err := a.Assign(objs, nil); err != nil {
			t.Fatal(err)
		}
		return objs.Services
	}
	first, second := load(), load()
	if first[0] != plain || second[0] != plain {
		t.Errorf("a ClusterIP Service was copied: the model should get the loaded object itself")
	}
	if first[1] == np || second[1] != first[1] {
		t.Errorf("NodePort Service: got %p then %p from %p; want one copy, handed out again while its port is the same", first[1], second[1], np)
	}
	// The file changes: a new object asking for a static port.
	np = np.DeepCopy()
	np.Spec.Ports[0].NodePort = 30080
	third := load()
	if third[1] == second[1] || third[1] != np || third[1].Spec.Ports[0].NodePort != 30080 {
		t.Errorf("after the file named its node port: got %p (port %d); want the loaded object itself, which says it already",
			third[1], third[1].Spec.Ports[0].NodePort)
	}
}
