package e2e

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

// The static scenario: Services of every shape at once, next to an invalid Service and a
// malformed file, probed from an outside client, a pod and the node. Pods 1-3 back "web";
// pod-4 is a client pod that no Service sends to.
const (
	rangeStart, rangeEnd = 16384, 16393
	invalidPort          = 5000
	webNodePortTCP       = 30080
	webNodePortUDP       = 30081
	emptyNodePortTCP     = 30090
	emptyNodePortUDP     = 30091
	// unallocatedIndex is a ClusterIP of the service CIDR that no Service owns.
	unallocatedIndex = 200
)

// staticServices are the Services of TestServices and TestRenderMatchesDaemon.
func staticServices() []fixture.Service {
	return []fixture.Service{
		{
			Name: "web", Type: "LoadBalancer",
			ClusterIPs: []netip.Addr{lab.ClusterIPv4(10), lab.ClusterIPv6(10)},
			Ports: []fixture.Port{
				{Name: "http", Protocol: "TCP", Port: 80, Target: 8080, NodePort: webNodePortTCP},
				{Name: "dns", Protocol: "UDP", Port: 80, Target: 8080, NodePort: webNodePortUDP},
			},
			ExternalIPs:     []netip.Addr{lab.ExternalIPv4(1)},
			LoadBalancerIPs: []netip.Addr{lab.LoadBalancerIPv4(2)},
			Endpoints:       fixture.Pods(1, 2, 3),
		},
		{
			Name: "rtp", Namespace: "voip",
			ClusterIPs:  []netip.Addr{lab.ClusterIPv4(11)},
			Ports:       []fixture.Port{{Name: "rtp", Protocol: "UDP", Port: rangeStart}},
			Annotations: map[string]string{"nftproxy.io/port-ranges": "rtp=16384-16393"},
			Endpoints:   fixture.Pods(2),
		},
		{
			Name: "anyport", Type: "LoadBalancer",
			ClusterIPs:      []netip.Addr{lab.ClusterIPv4(12)},
			Ports:           []fixture.Port{{Name: "tcp", Protocol: "TCP", Port: 1}, {Name: "udp", Protocol: "UDP", Port: 1}},
			Annotations:     map[string]string{"nftproxy.io/all-ports": "true"},
			LoadBalancerIPs: []netip.Addr{lab.LoadBalancerIPv4(1)},
			Endpoints:       fixture.Pods(3),
		},
		{
			Name:       "hairpin",
			ClusterIPs: []netip.Addr{lab.ClusterIPv4(13)},
			Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "udp", Protocol: "UDP", Port: 80}},
			Endpoints:  fixture.Pods(1),
		},
		{
			Name: "empty", Type: "NodePort",
			ClusterIPs: []netip.Addr{lab.ClusterIPv4(14)},
			Ports: []fixture.Port{
				{Name: "http", Protocol: "TCP", Port: 80, NodePort: emptyNodePortTCP},
				{Name: "dns", Protocol: "UDP", Port: 80, NodePort: emptyNodePortUDP},
			},
		},
		{
			// Rejected: the range ends before it starts. pod-1 serves the port, so a daemon
			// that programmed it anyway would be caught.
			Name:        "invalid",
			ClusterIPs:  []netip.Addr{lab.ClusterIPv4(15)},
			Ports:       []fixture.Port{{Name: "rtp", Protocol: "UDP", Port: invalidPort}},
			Annotations: map[string]string{"nftproxy.io/port-ranges": "rtp=5000-4000"},
			Endpoints:   fixture.Pods(1),
		},
	}
}

// malformedManifest is a file the loader cannot read; the daemon must serve the rest.
const malformedManifest = "apiVersion: v1\nkind: Service\nmetadata: {name: broken\nspec: [\n"

// randomPorts picks n distinct ports for all-ports probes, away from every port the scenario
// uses otherwise and below the clients' ephemeral range.
func randomPorts(n int) []uint16 {
	var out []uint16
	for len(out) < n {
		p := uint16(1024 + rand.IntN(32767-1024))
		if p == 8080 || p == invalidPort || (p >= rangeStart-1 && p <= rangeEnd+1) || slices.Contains(out, p) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// staticPodPorts are the ports every pod serves: the Services' target ports, the range and one
// port beyond each of its edges (so that a wrongly forwarded edge is answered), the invalid
// Service's port and the all-ports probe ports.
func staticPodPorts(anyPorts []uint16) []lab.PortSpec {
	specs := []lab.PortSpec{lab.Port(80), lab.Port(8080), lab.Port(invalidPort), lab.PortRange(rangeStart-1, rangeEnd+1)}
	for _, p := range anyPorts {
		specs = append(specs, lab.Port(p))
	}
	return specs
}

// probe is one table row: from a host, to an address, what must happen.
type probe struct {
	name    string
	from    *netns.NS
	network string
	addr    string
	want    expect
}

// TestServices probes every Service shape of staticServices from an outside client, a pod and
// the node: which backend answers, on which port, seeing which source; and what must stay
// closed (refused or dropped).
func TestServices(t *testing.T) {
	t.Parallel()
	anyPorts := randomPorts(3)
	t.Logf("all-ports probe ports: %v", anyPorts)
	e := newEnv(t, lab.Options{Pods: 4, Ports: staticPodPorts(anyPorts)}, staticServices()...)
	e.writeFile("broken.yaml", malformedManifest)
	l := e.lab

	// Listeners that only the daemon's rules keep clients from: node ports of the Service without
	// endpoints (must be rejected) on the node, and an unallocated ClusterIP (must be dropped)
	// routed by the node to pod-4, which holds it. Not on the node itself: the node's own
	// addresses stay the node's even inside --service-cidr (start-up refuses such a CIDR, and the
	// drop skips local addresses). Before the daemon runs, they answer: the probes can fail.
	unallocated := lab.ClusterIPv4(unallocatedIndex)
	holder := l.Pod(4)
	if _, err := holder.NS.Run("ip", "address", "add", unallocated.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Node.Run("ip", "route", "add", unallocated.String()+"/32", "via", holder.IPv4.String()); err != nil {
		t.Fatal(err)
	}
	nodeSrv, err := lab.Serve(l.Node, "node", []netip.Addr{netip.MustParseAddr(lab.NodeIPv4)},
		[]lab.PortSpec{lab.Port(emptyNodePortTCP), lab.Port(emptyNodePortUDP)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nodeSrv.Close)
	holderSrv, err := lab.Serve(holder.NS, "unallocated-holder", []netip.Addr{unallocated}, []lab.PortSpec{lab.Port(80)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(holderSrv.Close)
	nodeIP := netip.MustParseAddr(lab.NodeIPv4)
	for _, c := range []struct {
		network, addr, who string
	}{
		{"tcp", hostPort(nodeIP, emptyNodePortTCP), "node"},
		{"udp", hostPort(nodeIP, emptyNodePortUDP), "node"},
		{"tcp", hostPort(unallocated, 80), "unallocated-holder"},
		{"udp", hostPort(unallocated, 80), "unallocated-holder"},
	} {
		r := l.Client(1).Dial(e.ctx, c.network, c.addr)
		if r.Outcome != lab.Replied || r.Reply.Pod != c.who {
			t.Fatalf("control before the daemon runs: %s %s: got %v, want a reply from %s", c.network, c.addr, r, c.who)
		}
	}

	services := staticServices()
	e.start(services[:5]...) // all but the invalid one
	t.Run("invalid Service is not programmed", func(t *testing.T) {
		if rs := e.ruleset(); containsKey(rs, services[5]) {
			t.Errorf("ruleset names %s, want the invalid Service left out:\n%s", services[5].Key(), rs)
		}
	})

	var (
		client, pod4 = l.Client(1), l.Pod(4)
		web          = podNames(1, 2, 3)
		masq4        = netip.MustParseAddr(lab.PodGatewayV4) // masquerade: the node's address towards the pods
		masq6        = netip.MustParseAddr(lab.PodGatewayV6)
		nodeV4       = netip.MustParseAddr(lab.NodeIPv4)
		nodeV6       = netip.MustParseAddr(lab.NodeIPv6)
		refused      = expect{outcome: lab.Refused}
		dropped      = expect{outcome: lab.Timeout}
	)
	probes := []probe{
		// ClusterIP: pods are not masqueraded, outside clients and the node are.
		{"clusterIP from pod tcp v4", pod4.NS, "tcp", hostPort(lab.ClusterIPv4(10), 80), replied(web, 8080, pod4.IPv4)},
		{"clusterIP from pod udp v4", pod4.NS, "udp", hostPort(lab.ClusterIPv4(10), 80), replied(web, 8080, pod4.IPv4)},
		{"clusterIP from pod tcp v6", pod4.NS, "tcp", hostPort(lab.ClusterIPv6(10), 80), replied(web, 8080, pod4.IPv6)},
		{"clusterIP from node tcp v4", l.Node, "tcp", hostPort(lab.ClusterIPv4(10), 80), replied(web, 8080, l.NodeIPs()...)},
		{"clusterIP from node udp v4", l.Node, "udp", hostPort(lab.ClusterIPv4(10), 80), replied(web, 8080, l.NodeIPs()...)},
		{"clusterIP from node tcp v6", l.Node, "tcp", hostPort(lab.ClusterIPv6(10), 80), replied(web, 8080, l.NodeIPs()...)},
		{"clusterIP from client tcp v4", client.NS, "tcp", hostPort(lab.ClusterIPv4(10), 80), replied(web, 8080, masq4)},
		{"clusterIP from client udp v4", client.NS, "udp", hostPort(lab.ClusterIPv4(10), 80), replied(web, 8080, masq4)},
		{"clusterIP from client tcp v6", client.NS, "tcp", hostPort(lab.ClusterIPv6(10), 80), replied(web, 8080, masq6)},
		{"clusterIP from client udp v6", client.NS, "udp", hostPort(lab.ClusterIPv6(10), 80), replied(web, 8080, masq6)},
		// Entry from outside: node port, LoadBalancer IP, external IP; always masqueraded.
		{"nodePort tcp v4", client.NS, "tcp", hostPort(nodeV4, webNodePortTCP), replied(web, 8080, masq4)},
		{"nodePort udp v4", client.NS, "udp", hostPort(nodeV4, webNodePortUDP), replied(web, 8080, masq4)},
		{"nodePort tcp v6", client.NS, "tcp", hostPort(nodeV6, webNodePortTCP), replied(web, 8080, masq6)},
		{"loadBalancer IP tcp", client.NS, "tcp", hostPort(lab.LoadBalancerIPv4(2), 80), replied(web, 8080, masq4)},
		{"loadBalancer IP udp", client.NS, "udp", hostPort(lab.LoadBalancerIPv4(2), 80), replied(web, 8080, masq4)},
		{"externalIP tcp", client.NS, "tcp", hostPort(lab.ExternalIPv4(1), 80), replied(web, 8080, masq4)},
		{"externalIP udp", client.NS, "udp", hostPort(lab.ExternalIPv4(1), 80), replied(web, 8080, masq4)},
		// Hairpin: pod-1 reaches itself and must see the node, or its answer would short-cut.
		{"hairpin tcp", l.Pod(1).NS, "tcp", hostPort(lab.ClusterIPv4(13), 80), replied(podNames(1), 80, masq4)},
		{"hairpin udp", l.Pod(1).NS, "udp", hostPort(lab.ClusterIPv4(13), 80), replied(podNames(1), 80, masq4)},
		// UDP range: the edges, the middle, one past each edge, and TCP (not a protocol of it).
		{"range start-1", client.NS, "udp", hostPort(lab.ClusterIPv4(11), rangeStart-1), refused},
		{"range start", client.NS, "udp", hostPort(lab.ClusterIPv4(11), rangeStart), replied(podNames(2), rangeStart, masq4)},
		{"range middle", client.NS, "udp", hostPort(lab.ClusterIPv4(11), 16389), replied(podNames(2), 16389, masq4)},
		{"range end", client.NS, "udp", hostPort(lab.ClusterIPv4(11), rangeEnd), replied(podNames(2), rangeEnd, masq4)},
		{"range end+1", client.NS, "udp", hostPort(lab.ClusterIPv4(11), rangeEnd+1), refused},
		{"range from pod", pod4.NS, "udp", hostPort(lab.ClusterIPv4(11), 16390), replied(podNames(2), 16390, pod4.IPv4)},
		{"range tcp not a protocol of it", client.NS, "tcp", hostPort(lab.ClusterIPv4(11), rangeStart), refused},
		// No endpoints: refused at once on the ClusterIP and the node ports (a node listener
		// on the node ports would otherwise answer), from a client and from the node.
		{"no endpoints clusterIP tcp", client.NS, "tcp", hostPort(lab.ClusterIPv4(14), 80), refused},
		{"no endpoints clusterIP udp", client.NS, "udp", hostPort(lab.ClusterIPv4(14), 80), refused},
		{"no endpoints clusterIP tcp from node", l.Node, "tcp", hostPort(lab.ClusterIPv4(14), 80), refused},
		{"no endpoints clusterIP udp from pod", pod4.NS, "udp", hostPort(lab.ClusterIPv4(14), 80), refused},
		{"no endpoints nodePort tcp", client.NS, "tcp", hostPort(nodeV4, emptyNodePortTCP), refused},
		{"no endpoints nodePort udp", client.NS, "udp", hostPort(nodeV4, emptyNodePortUDP), refused},
		// Undefined port of a live ClusterIP: refused; unallocated ClusterIP: dropped (the
		// node owns that address here, so without the drop it would answer).
		{"undefined port tcp", client.NS, "tcp", hostPort(lab.ClusterIPv4(10), 81), refused},
		{"undefined port udp", client.NS, "udp", hostPort(lab.ClusterIPv4(10), 81), refused},
		{"undefined port tcp v6", client.NS, "tcp", hostPort(lab.ClusterIPv6(10), 81), refused},
		{"undefined port from pod", pod4.NS, "tcp", hostPort(lab.ClusterIPv4(10), 8080), refused},
		{"unallocated clusterIP tcp", client.NS, "tcp", hostPort(unallocated, 80), dropped},
		{"unallocated clusterIP udp", client.NS, "udp", hostPort(unallocated, 80), dropped},
		// The invalid Service is not programmed: its ClusterIP is unallocated, so dropped.
		{"invalid Service dropped", client.NS, "udp", hostPort(lab.ClusterIPv4(15), invalidPort), dropped},
	}
	for _, p := range anyPorts {
		for _, network := range []string{"tcp", "udp"} {
			probes = append(probes,
				probe{"all-ports clusterIP " + network, client.NS, network, hostPort(lab.ClusterIPv4(12), p), replied(podNames(3), p, masq4)},
				probe{"all-ports clusterIP from pod " + network, pod4.NS, network, hostPort(lab.ClusterIPv4(12), p), replied(podNames(3), p, pod4.IPv4)},
				probe{"all-ports loadBalancer IP " + network, client.NS, network, hostPort(lab.LoadBalancerIPv4(1), p), replied(podNames(3), p, masq4)},
				// Never on the node's own addresses: the node has no listener there, so its
				// own stack refuses; a reply would come from pod-3.
				probe{"all-ports not on node IP " + network, client.NS, network, hostPort(nodeV4, p), refused},
				probe{"all-ports not on node link IP " + network, client.NS, network, hostPort(client.GatewayV4, p), refused},
			)
		}
	}
	t.Run("probes", func(t *testing.T) {
		for _, p := range probes {
			t.Run(p.name+" "+p.addr, func(t *testing.T) {
				t.Parallel()
				p.want.check(t, p.network+" "+p.addr, lab.Dial(e.ctx, p.from, p.network, p.addr))
			})
		}
	})

	// Spread: every endpoint gets traffic, nothing else happens. Runs after the probes so the
	// two do not compete for the lab's two cores.
	for _, network := range []string{"tcp", "udp"} {
		t.Run("spread "+network, func(t *testing.T) {
			const n = 60
			addr := hostPort(lab.ClusterIPv4(10), 80)
			got := client.Spread(e.ctx, network, addr, n)
			if got.Outcomes[lab.Replied] != n {
				t.Errorf("%s %s x%d: got %v (errors %v), want %d replies", network, addr, n, got, got.Errors, n)
			}
			for _, pod := range web {
				if got.Pods[pod] == 0 {
					t.Errorf("%s %s x%d: got %v, want every one of %v to answer", network, addr, n, got, web)
				}
			}
		})
	}

	t.Run("malformed file reported, good Services served", func(t *testing.T) {
		// Every probe above ran next to broken.yaml; here: the daemon said so.
		if out := e.daemon.Output(); !containsAll(out, "broken.yaml") {
			t.Errorf("daemon output does not mention broken.yaml:\n%s", out)
		}
	})
}
