package ruleset

import (
	"fmt"
	"math/rand"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// Policy tests run on node-a (zone z1), the node of the address plan in builder_test.go.
// Endpoints: pod1 on node-a, pod2 and pod3 on node-b.
const (
	thisNode  = "node-a"
	otherNode = "node-b"
	outsider  = "198.18.1.100" // a client outside every loadBalancerSourceRanges below
)

func on(node string, ips ...string) []model.Endpoint {
	eps := ready(8080, ips...)
	for i := range eps {
		eps[i] = eps[i].At(node, "")
	}
	return eps
}

func policyBuilder(t *testing.T) *Builder {
	return testBuilder(t, func(c *Config) { c.NodeName = thisNode })
}

func zonedNode(zone string) *model.Node {
	n := testNode()
	n.Labels = map[string]string{model.LabelTopologyZone: zone}
	return n
}

// webPort is a NodePort/LoadBalancer port with an external IP, customised by mut.
func webPort(mut func(*model.ServicePort)) *model.Service {
	sp := model.ServicePort{
		Name: pn("default", "web", "http", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080, NodePort: 30080,
		ClusterIPs: addrs(webIP), LoadBalancerIPs: addrs(lbIP), ExternalIPs: addrs(extIP),
		Endpoints: append(on(thisNode, pod1), on(otherNode, pod2)...),
	}
	mut(&sp)
	return &model.Service{Key: sp.Name.Service, Ports: []model.ServicePort{sp}}
}

func local(p packet) packet { p.Local = true; return p }

type traceCase struct {
	name string
	p    packet
	want outcome
}

func runTraces(t *testing.T, tr *tracer, cases []traceCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := tr.run(c.p); got.String() != c.want.String() {
				t.Errorf("trace %+v\n got %s\nwant %s", c.p, got, c.want)
			}
		})
	}
}

var (
	ep1     = []string{"198.18.128.10:8080"}
	ep2     = []string{"198.18.128.11:8080"}
	ep12    = []string{"198.18.128.10:8080", "198.18.128.11:8080"}
	ep123   = []string{"198.18.128.10:8080", "198.18.128.11:8080", "198.18.128.12:8080"}
	dropped = outcome{"drop", nil, false}
)

func TestExternalTrafficPolicyLocal(t *testing.T) {
	etp := func(sp *model.ServicePort) { sp.ExternalTrafficLocal = true }
	tr := newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{webPort(etp)}), nodeIP, nodeBridge)
	runTraces(t, tr, []traceCase{
		{"node port: local endpoint only, client address kept", tcp(client, nodeIP, 30080), outcome{"accept", ep1, false}},
		{"LoadBalancer IP: local endpoint only, client address kept", tcp(client, lbIP, 80), outcome{"accept", ep1, false}},
		{"external IP: local endpoint only, client address kept", tcp(client, extIP, 80), outcome{"accept", ep1, false}},
		{"pod to the LoadBalancer IP: short-circuit to every endpoint", tcp(pod3, lbIP, 80), outcome{"accept", ep12, false}},
		{"pod to a node port: short-circuit", tcp(pod3, nodeBridge, 30080), outcome{"accept", ep12, false}},
		{"the node to its own node port: every endpoint, masqueraded", local(tcp(nodeIP, nodeIP, 30080)), outcome{"accept", ep12, true}},
		{"the node to the LoadBalancer IP: every endpoint, masqueraded", local(tcp(nodeIP, lbIP, 80)), outcome{"accept", ep12, true}},
		{"ClusterIP keeps Cluster policy", tcp(client, webIP, 80), outcome{"accept", ep12, true}},
		{"ClusterIP from a pod", tcp(pod3, webIP, 80), outcome{"accept", ep12, false}},
	})

	remoteOnly := func(sp *model.ServicePort) { etp(sp); sp.Endpoints = on(otherNode, pod2) }
	tr = newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{webPort(remoteOnly)}), nodeIP, nodeBridge)
	runTraces(t, tr, []traceCase{
		{"no local endpoint: node port dropped", tcp(client, nodeIP, 30080), dropped},
		{"no local endpoint: LoadBalancer IP dropped", tcp(client, lbIP, 80), dropped},
		{"no local endpoint: external IP dropped", tcp(client, extIP, 80), dropped},
		{"no local endpoint: pods still reach the Service", tcp(pod3, lbIP, 80), outcome{"accept", ep2, false}},
		{"no local endpoint: the node still reaches it", local(tcp(nodeIP, extIP, 80)), outcome{"accept", ep2, true}},
		{"no local endpoint: ClusterIP works", tcp(client, webIP, 80), outcome{"accept", ep2, true}},
	})

	// A terminating local endpoint serves external traffic only while no local one is ready.
	terminating := func(sp *model.ServicePort) {
		etp(sp)
		sp.Endpoints = append(on(otherNode, pod2), model.Endpoint{Addr: netip.MustParseAddr(pod1), Port: 8080, Serving: true, Terminating: true}.At(thisNode, ""))
	}
	tr = newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{webPort(terminating)}), nodeIP, nodeBridge)
	runTraces(t, tr, []traceCase{
		{"local serving terminating endpoint takes external traffic", tcp(client, nodeIP, 30080), outcome{"accept", ep1, false}},
		{"but no new cluster traffic", tcp(pod3, webIP, 80), outcome{"accept", ep2, false}},
	})
}

func TestInternalTrafficPolicyLocal(t *testing.T) {
	itp := func(sp *model.ServicePort) {
		sp.InternalTrafficLocal = true
		sp.NodePort, sp.LoadBalancerIPs, sp.ExternalIPs = 0, nil, nil
	}
	tr := newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{webPort(itp)}), nodeIP, nodeBridge)
	runTraces(t, tr, []traceCase{
		{"pod: local endpoint only", tcp(pod3, webIP, 80), outcome{"accept", ep1, false}},
		{"outside client: local endpoint, masqueraded", tcp(client, webIP, 80), outcome{"accept", ep1, true}},
		{"the node itself", local(tcp(nodeIP, webIP, 80)), outcome{"accept", ep1, true}},
	})
	none := func(sp *model.ServicePort) { itp(sp); sp.Endpoints = on(otherNode, pod2) }
	tr = newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{webPort(none)}), nodeIP, nodeBridge)
	runTraces(t, tr, []traceCase{
		{"no local endpoint: pod traffic dropped", tcp(pod3, webIP, 80), dropped},
		{"no local endpoint: node traffic dropped", local(tcp(nodeIP, webIP, 80)), dropped},
	})
	empty := func(sp *model.ServicePort) { itp(sp); sp.Endpoints = nil }
	tr = newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{webPort(empty)}), nodeIP, nodeBridge)
	runTraces(t, tr, []traceCase{{"no endpoint anywhere: rejected", tcp(pod3, webIP, 80), outcome{"reject-tcp-reset", nil, false}}})

	// Both policies Local with external addresses: external traffic still short-circuits pods
	// to the whole cluster, ClusterIP traffic stays local.
	both := func(sp *model.ServicePort) { sp.InternalTrafficLocal, sp.ExternalTrafficLocal = true, true }
	tr = newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{webPort(both)}), nodeIP, nodeBridge)
	runTraces(t, tr, []traceCase{
		{"both Local: ClusterIP local only", tcp(pod3, webIP, 80), outcome{"accept", ep1, false}},
		{"both Local: pod to LB IP short-circuits", tcp(pod3, lbIP, 80), outcome{"accept", ep12, false}},
		{"both Local: outside to node port", tcp(client, nodeIP, 30080), outcome{"accept", ep1, false}},
	})
}

func TestSessionAffinity(t *testing.T) {
	aff := func(sp *model.ServicePort) {
		sp.AffinityTimeout = 3 * time.Second
		sp.Endpoints = append(on(thisNode, pod1), on(otherNode, pod2, pod3)...)
	}
	svc := webPort(aff)
	rs := policyBuilder(t).Ruleset(testNode(), []*model.Service{svc})
	tr := newTracer(t, rs, nodeIP, nodeBridge)

	for d, p := range tr.spread(tcp(client, webIP, 80)) {
		if p < 0.333 || p > 0.334 {
			t.Errorf("a new client goes to %s with probability %.4f, want 1/3", d, p)
		}
	}
	if got := tr.run(tcp(client, webIP, 80)); !slices.Equal(got.dnat, ep123) {
		t.Fatalf("before any connection: candidates %v, want %v", got.dnat, ep123)
	}
	rng := rand.New(rand.NewSource(1))
	pick := func(mod uint32) uint32 { return uint32(rng.Intn(int(mod))) }
	first := tr.connect(tcp(client, webIP, 80), pick)
	for i := 0; i < 20; i++ {
		if got := tr.connect(tcp(client, webIP, 80), pick); got.String() != first.String() {
			t.Fatalf("connection %d of the same client: got %s, want %s (sticky)", i+2, got, first)
		}
	}
	// Entries are per frontend (README.md): through the LoadBalancer IP the client is new.
	if got := tr.run(tcp(client, lbIP, 80)); !slices.Equal(got.dnat, ep123) {
		t.Errorf("the same client through the LoadBalancer IP: candidates %v, want %v (its own entry)", got.dnat, ep123)
	}
	viaLB := tr.connect(tcp(client, lbIP, 80), pick)
	if got := tr.connect(tcp(client, lbIP, 80), pick); got.String() != viaLB.String() {
		t.Errorf("the same client through the LoadBalancer IP again: got %s, want %s (sticky)", got, viaLB)
	}
	if got := tr.run(tcp("198.18.1.3", webIP, 80)); !slices.Equal(got.dnat, ep123) {
		t.Errorf("another client: candidates %v, want %v", got.dnat, ep123)
	}
	tr.expire()
	if got := tr.run(tcp(client, webIP, 80)); !slices.Equal(got.dnat, ep123) {
		t.Errorf("after the timeout: candidates %v, want %v", got.dnat, ep123)
	}

	// The node's own connections: DNATed in nat output, recorded after it in output.
	tr.expire()
	fromNode := tr.connect(local(tcp(nodeIP, webIP, 80)), pick)
	for i := 0; i < 5; i++ {
		if got := tr.connect(local(tcp(nodeIP, webIP, 80)), pick); got.String() != fromNode.String() {
			t.Fatalf("connection %d from the node: got %s, want %s (sticky)", i+2, got, fromNode)
		}
	}

	// Shared mode: no set and no chain of its own; the shared maps of the base layout, the
	// shared hit chain, the sticky pick chain of 3 and a recording chain per protocol and timeout.
	for _, s := range rs.Sets {
		if strings.HasPrefix(s.Name, "aff-") {
			t.Errorf("affinity set %s: an ip table keeps affinity in the shared maps only", s.Name)
		}
	}
	for _, c := range rs.Chains {
		if strings.Contains(c.Name, "default/") {
			t.Errorf("chain %s: a sticky single port of an ip table has no chain of its own", c.Name)
		}
	}
	for _, want := range []string{ChainAffinityHit, stickyName(frontendKind{shard: endpointShard(svc.Key, DefaultEndpointShards)}.pickChain(false, 3), true), AffinityRecordChain("tcp", 3*time.Second)} {
		if !slices.ContainsFunc(rs.Chains, func(c nft.Chain) bool { return c.Name == want }) {
			t.Errorf("no chain %s", want)
		}
	}
}

// TestSessionAffinityIPv6: an ip6 table keeps one dynamic map per sticky port, client ->
// endpoint address (nft 1.0.6 cannot write a shared "client . frontend" map's update there), so a
// client sticks across the port's frontends; a port whose endpoints differ in their port number
// keeps a set per endpoint.
func TestSessionAffinityIPv6(t *testing.T) {
	b, err := NewBuilder(Config{Family: nft.IPv6, MasqueradeMark: 0x4000, DropMark: 0x8000, NodeName: thisNode})
	if err != nil {
		t.Fatal(err)
	}
	svc := func(eps ...model.Endpoint) *model.Service {
		return &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "web6"}, Ports: []model.ServicePort{{
			Name: pn("default", "web6", "http", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080, ClusterIPs: addrs("fd00:19::10"),
			LoadBalancerIPs: addrs("fd00:19::100"), AffinityTimeout: 3 * time.Second, Endpoints: eps,
		}}}
	}
	sets := func(rs *nft.Ruleset, prefix string) (out []nft.Set) {
		for _, s := range rs.Sets {
			if strings.HasPrefix(s.Name, prefix) {
				out = append(out, s)
			}
		}
		return out
	}
	rs := b.Ruleset(nil, []*model.Service{svc(ready(8080, "fd00:18::a", "fd00:18::b")...)})
	maps := sets(rs, "affmap-")
	if len(maps) != 1 || len(sets(rs, "aff-")) != 0 || !maps[0].Dynamic || len(maps[0].Data) != 1 {
		t.Fatalf("sets %v, want one dynamic map client -> address for the port, no set per endpoint", rs.Sets)
	}
	tr := newTracer(t, rs)
	if got := tr.run(tcp("fd00:18::1:1", "fd00:19::10", 80)); len(got.dnat) != 2 {
		t.Fatalf("a new client: candidates %v, want both endpoints", got.dnat)
	}
	first := tr.connect(tcp("fd00:18::1:1", "fd00:19::10", 80), func(uint32) uint32 { return 1 })
	for _, dst := range []string{"fd00:19::10", "fd00:19::100"} {
		if got := tr.run(tcp("fd00:18::1:1", dst, 80)); !slices.Equal(got.dnat, first.dnat) {
			t.Errorf("the same client to %s: got %v, want %v (per Service port)", dst, got.dnat, first.dnat)
		}
	}
	tr.expire()
	if got := tr.run(tcp("fd00:18::1:1", "fd00:19::10", 80)); len(got.dnat) != 2 {
		t.Errorf("after the timeout: candidates %v, want both endpoints", got.dnat)
	}

	mixed := append(ready(8080, "fd00:18::a"), ready(9090, "fd00:18::b")...)
	rs = b.Ruleset(nil, []*model.Service{svc(mixed...)})
	if n, m := len(sets(rs, "aff-")), len(sets(rs, "affmap-")); n != 2 || m != 0 {
		t.Fatalf("endpoints on two port numbers: %d per-endpoint sets and %d maps, want 2 and 0", n, m)
	}
	for _, s := range sets(rs, "aff-") {
		if s.Timeout != 3*time.Second || s.Size != nft.DynsetDefaultSize {
			t.Errorf("affinity set %+v: want timeout 3s and the kernel's default size", s)
		}
	}
	// The per-endpoint sets keep a client on its endpoint too, until the timeout.
	tr = newTracer(t, rs)
	for pick := uint32(0); pick < 2; pick++ {
		c := tcp(fmt.Sprintf("fd00:18::2:%d", pick), "fd00:19::10", 80)
		first := tr.connect(c, func(uint32) uint32 { return pick })
		if len(first.dnat) != 1 {
			t.Fatalf("a new client picking %d: got %v, want one endpoint", pick, first.dnat)
		}
		if got := tr.run(c); !slices.Equal(got.dnat, first.dnat) {
			t.Errorf("endpoints on two port numbers: the client's next connection goes to %v, want %v", got.dnat, first.dnat)
		}
	}
	tr.expire()
	if got := tr.run(tcp("fd00:18::2:0", "fd00:19::10", 80)); len(got.dnat) != 2 {
		t.Errorf("endpoints on two port numbers, after the timeout: candidates %v, want both endpoints", got.dnat)
	}
}

func TestSessionAffinityWithLocalPolicyAndRanges(t *testing.T) {
	both := webPort(func(sp *model.ServicePort) {
		sp.AffinityTimeout, sp.ExternalTrafficLocal = time.Minute, true
		sp.Endpoints = append(on(thisNode, pod1), on(otherNode, pod2)...)
	})
	tr := newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{both}), nodeIP, nodeBridge)
	tr.connect(tcp(client, nodeIP, 30080), func(uint32) uint32 { return 0 })
	if got := tr.run(tcp(client, nodeIP, 30080)); !slices.Equal(got.dnat, ep1) {
		t.Errorf("after an external connection to the local endpoint, the client's node-port traffic goes to %v, want %v", got.dnat, ep1)
	}
	if got := tr.run(tcp(client, webIP, 80)); !slices.Equal(got.dnat, ep12) {
		t.Errorf("the client's ClusterIP traffic goes to %v, want a new pick of %v (entries are per frontend)", got.dnat, ep12)
	}

	rtp := &model.Service{Key: model.ServiceKey{Namespace: "voip", Name: "rtp"}, Ports: []model.ServicePort{{
		Name: pn("voip", "rtp", "rtp", model.UDP), Port: 16384, PortEnd: 16483, ClusterIPs: addrs(rtpIP),
		AffinityTimeout: time.Minute, Endpoints: ready(0, pod1, pod2),
	}}}
	tr = newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{rtp}), nodeIP)
	if got, want := tr.run(udp(client, rtpIP, 16400)), (outcome{"accept", []string{pod1, pod2}, true}); got.String() != want.String() {
		t.Errorf("range with affinity: got %s, want %s (port kept)", got, want)
	}
}
