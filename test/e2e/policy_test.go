package e2e

import (
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

// Traffic policies: externalTrafficPolicy and internalTrafficPolicy Local, ClientIP
// session affinity, loadBalancerSourceRanges, topology. The lab's pods all sit on this node's
// bridge; an endpoint counts as remote when its EndpointSlice says nodeName: node-b, which is
// all the daemon looks at.

const otherNodeName = "node-b"

// local and remote are ready endpoints on lab pods, on this node and on another one.
func local(pods ...int) []fixture.Endpoint  { return fixture.Pods(pods...) }
func remote(pods ...int) []fixture.Endpoint { return fixture.PodsOn(otherNodeName, pods...) }

// policyWeb is an IPv4 TCP Service from port 80 to 8080: the shape the policy scenarios vary.
func policyWeb(name string, n int, eps ...fixture.Endpoint) fixture.Service {
	return fixture.Service{Name: name, ClusterIPs: []netip.Addr{lab.ClusterIPv4(n)},
		Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}}, Endpoints: eps}
}

// externalLocal sets externalTrafficPolicy Local and, when not 0, the health-check node port.
func externalLocal(healthCheckNodePort int32) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = healthCheckNodePort
	}
}

const (
	etpNodePort, etpRemoteNodePort = 30100, 30101
	affinitySeconds                = 3
)

func policyServices() []fixture.Service {
	etp := policyWeb("etp", 20, append(local(1), remote(2)...)...)
	etp.Type, etp.Ports[0].NodePort, etp.LoadBalancerIPs = "LoadBalancer", etpNodePort, []netip.Addr{lab.LoadBalancerIPv4(20)}
	etp.AllocateNodePorts, etp.Edit = ptrTo(true), externalLocal(0)

	etpRemote := policyWeb("etp-remote", 21, remote(2)...)
	etpRemote.Type, etpRemote.Ports[0].NodePort = "NodePort", etpRemoteNodePort
	etpRemote.Edit = externalLocal(0)

	internalLocal := func(s *corev1.Service) {
		s.Spec.InternalTrafficPolicy = ptrTo(corev1.ServiceInternalTrafficPolicyLocal)
	}
	itp := policyWeb("itp", 22, append(local(1), remote(2, 3)...)...)
	itp.Edit = internalLocal
	itpRemote := policyWeb("itp-remote", 23, remote(2)...)
	itpRemote.Edit = internalLocal

	// Dual-stack with a LoadBalancer IP: ip keeps affinity per frontend in a shared map, ip6 in a
	// set per endpoint.
	sticky := policyWeb("sticky", 24, local(1, 2, 3)...)
	sticky.ClusterIPs = append(sticky.ClusterIPs, lab.ClusterIPv6(24))
	sticky.Type, sticky.LoadBalancerIPs, sticky.AllocateNodePorts = "LoadBalancer", []netip.Addr{lab.LoadBalancerIPv4(24)}, ptrTo(false)
	sticky.Edit = func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo(int32(affinitySeconds))}}
	}

	ranged := fixture.Service{Name: "ranged", Type: "LoadBalancer", ClusterIPs: []netip.Addr{lab.ClusterIPv4(25)},
		Ports:           []fixture.Port{{Name: "rtp", Protocol: "UDP", Port: rangeStart}},
		LoadBalancerIPs: []netip.Addr{lab.LoadBalancerIPv4(25)}, AllocateNodePorts: ptrTo(false),
		Annotations:  map[string]string{"nftproxy.io/port-ranges": fmt.Sprintf("rtp=%d-%d", rangeStart, rangeEnd)},
		SourceRanges: []string{"198.18.1.0/24"},
		Endpoints:    local(1, 2)}
	return []fixture.Service{etp, etpRemote, itp, itpRemote, sticky, ranged}
}

func ptrTo[T any](v T) *T { return &v }

// TestTrafficPolicies runs the daemon on the policy Services and probes them from an outside
// client inside the source ranges (client-1), one outside them (client-2), pod-4 and the node.
func TestTrafficPolicies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Clients: 2, Pods: 4, Ports: []lab.PortSpec{lab.Port(8080), lab.PortRange(rangeStart, rangeEnd)}})
	services := policyServices()
	for _, s := range services {
		e.write(s)
	}
	e.start(services...)
	l := e.lab
	var (
		c1, c2, pod4 = l.Client(1), l.Client(2), l.Pod(4)
		nodeV4       = netip.MustParseAddr(lab.NodeIPv4)
		masq4        = netip.MustParseAddr(lab.PodGatewayV4)
		dropped      = expect{outcome: lab.Timeout}
	)
	probes := []probe{
		// eTP Local: outside clients reach only the local endpoint and keep their address.
		{"eTP Local node port: local endpoint, client address kept", c1.NS, "tcp", hostPort(nodeV4, etpNodePort), replied(podNames(1), 8080, c1.IPv4)},
		{"eTP Local LB IP: local endpoint, client address kept", c1.NS, "tcp", hostPort(lab.LoadBalancerIPv4(20), 80), replied(podNames(1), 8080, c1.IPv4)},
		{"eTP Local, pod to LB IP: short-circuit", pod4.NS, "tcp", hostPort(lab.LoadBalancerIPv4(20), 80), replied(podNames(1, 2), 8080, pod4.IPv4)},
		{"eTP Local ClusterIP: Cluster policy", c1.NS, "tcp", hostPort(lab.ClusterIPv4(20), 80), replied(podNames(1, 2), 8080, masq4)},
		// eTP Local on a node without a local endpoint: external traffic dropped, not rejected.
		{"eTP Local, no local endpoint: node port dropped", c1.NS, "tcp", hostPort(nodeV4, etpRemoteNodePort), dropped},
		{"eTP Local, no local endpoint: the node still reaches it", l.Node, "tcp", hostPort(nodeV4, etpRemoteNodePort), replied(podNames(2), 8080, l.NodeIPs()...)},
		{"eTP Local, no local endpoint: pods reach the ClusterIP", pod4.NS, "tcp", hostPort(lab.ClusterIPv4(21), 80), replied(podNames(2), 8080, pod4.IPv4)},
		// iTP Local.
		{"iTP Local: none local, dropped", pod4.NS, "tcp", hostPort(lab.ClusterIPv4(23), 80), dropped},
		// Source ranges on a range Service's LoadBalancer IP.
		{"source range: inside, range start", c1.NS, "udp", hostPort(lab.LoadBalancerIPv4(25), rangeStart), replied(podNames(1, 2), rangeStart, masq4)},
		{"source range: inside, range end", c1.NS, "udp", hostPort(lab.LoadBalancerIPv4(25), rangeEnd), replied(podNames(1, 2), rangeEnd, masq4)},
		{"source range: outside, range start dropped", c2.NS, "udp", hostPort(lab.LoadBalancerIPv4(25), rangeStart), dropped},
		{"source range: outside, range end dropped", c2.NS, "udp", hostPort(lab.LoadBalancerIPv4(25), rangeEnd), dropped},
		{"source range: ClusterIP not filtered", c2.NS, "udp", hostPort(lab.ClusterIPv4(25), rangeStart), replied(podNames(1, 2), rangeStart, masq4)},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			p.want.check(t, p.addr, lab.Dial(e.ctx, p.from, p.network, p.addr))
		})
	}

	t.Run("eTP Local spreads only over the local endpoint", func(t *testing.T) {
		got := c1.Spread(e.ctx, "tcp", hostPort(nodeV4, etpNodePort), 12)
		if got.Pods["pod-1"] != 12 {
			t.Errorf("12 connections to the node port: got %s, want pod-1=12", got)
		}
	})
	t.Run("iTP Local spreads only over the local endpoint", func(t *testing.T) {
		got := pod4.Spread(e.ctx, "tcp", hostPort(lab.ClusterIPv4(22), 80), 12)
		if got.Pods["pod-1"] != 12 {
			t.Errorf("12 connections to the ClusterIP: got %s, want pod-1=12", got)
		}
	})
	t.Run("affinity sticks, then expires", func(t *testing.T) { testAffinity(t, e) })
	t.Run("affinity per frontend and in IPv6", func(t *testing.T) { testAffinityFrontends(t, e) })
}

// testAffinity: pod-4's connections stick to the endpoint its first one reached; the kernel's
// affinity map holds one entry for pod-4; once the timeout has passed it is gone and a new connection picks afresh (a new pick differs from the old one with
// probability 2/3, so up to 8 rounds are tried).
func testAffinity(t *testing.T, e *env) {
	pod4 := e.lab.Pod(4)
	addr := hostPort(lab.ClusterIPv4(24), 80)
	first := pod4.Dial(e.ctx, "tcp", addr)
	if first.Outcome != lab.Replied {
		t.Fatalf("first connection: %v", first)
	}
	if got := pod4.Spread(e.ctx, "tcp", addr, 12); got.Pods[first.Reply.Pod] != 12 {
		t.Fatalf("12 more connections after the first reached %s: got %s, want all on %s", first.Reply.Pod, got, first.Reply.Pod)
	}
	if n := e.affinityEntries(pod4.IPv4); n != 1 {
		t.Fatalf("pod-4 has %d affinity entries, want 1:\n%s", n, e.ruleset())
	}
	prev := first.Reply.Pod
	for round := 1; ; round++ {
		time.Sleep(affinitySeconds*time.Second + 500*time.Millisecond)
		if n := e.affinityEntries(pod4.IPv4); n != 0 {
			t.Fatalf("after the %d s timeout pod-4 still has %d affinity entries:\n%s", affinitySeconds, n, e.ruleset())
		}
		r := pod4.Dial(e.ctx, "tcp", addr)
		if r.Outcome != lab.Replied {
			t.Fatalf("round %d: %v", round, r)
		}
		if r.Reply.Pod != prev {
			t.Logf("round %d: after expiry pod-4 moved from %s to %s", round, prev, r.Reply.Pod)
			return
		}
		if round == 8 {
			t.Fatalf("after 8 expiries pod-4 always went back to %s: the affinity never expires", prev)
		}
	}
}

// testAffinityFrontends: a client sticks through the LoadBalancer IP (its own entry: ip keys
// affinity by frontend) and through the IPv6 ClusterIP (the port's own map), each entry
// recorded in the kernel.
func testAffinityFrontends(t *testing.T, e *env) {
	c1, pod4 := e.lab.Client(1), e.lab.Pod(4)
	for _, c := range []struct {
		name   string
		ns     *netns.NS
		addr   string
		client netip.Addr
	}{
		{"client-1 through the LoadBalancer IP", c1.NS, hostPort(lab.LoadBalancerIPv4(24), 80), c1.IPv4},
		{"pod-4 through the IPv6 ClusterIP", pod4.NS, hostPort(lab.ClusterIPv6(24), 80), pod4.IPv6},
	} {
		first := lab.Dial(e.ctx, c.ns, "tcp", c.addr)
		if first.Outcome != lab.Replied {
			t.Fatalf("%s, first connection: %v", c.name, first)
		}
		if got := lab.Spread(e.ctx, c.ns, "tcp", c.addr, 12); got.Pods[first.Reply.Pod] != 12 {
			t.Errorf("%s: 12 more connections after the first reached %s: got %s, want all there", c.name, first.Reply.Pod, got)
		}
		if n := e.affinityEntries(c.client); n != 1 {
			t.Errorf("%s: %d affinity entries of %s, want 1:\n%s", c.name, n, c.client, e.ruleset())
		}
	}
}

// affinityEntries counts the elements of client a in the node's affinity maps (ip: the shared
// "affinity" maps, keyed by client . frontend; ip6: one per port, keyed by client) and sets (ip6
// ports whose endpoints differ in their port: one per endpoint).
func (e *env) affinityEntries(a netip.Addr) int {
	e.t.Helper()
	n := 0
	inAffinity := false
	for _, line := range strings.Split(e.ruleset(), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "set ") || strings.HasPrefix(line, "map ") {
			inAffinity = strings.HasPrefix(line, "set aff-") || strings.HasPrefix(line, "map affmap-") ||
				line == "map affinity {" || line == "map affinity-addr {"
			continue
		}
		if inAffinity && strings.Contains(line, a.String()+" ") || inAffinity && strings.Contains(line, a.String()+",") {
			n++
		}
	}
	return n
}

// TestTopologyRendered: a node in zone z1 sends ClusterIP traffic only to the endpoints for its
// zone — by PreferClose (the endpoints' own zones) and by EndpointSlice hints — and to every
// endpoint when its zone has none. The ruleset is `nftproxy render`'s, loaded with nft: the
// running daemon builds Service fragments without the node's zone until its sync step passes the
// node to the builder (ruleset.Builder.ServiceOn).
func TestTopologyRendered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 4, Ports: []lab.PortSpec{lab.Port(8080)}})
	e.writeFile("node.yaml", fixture.Node{Name: fixture.NodeName, Labels: map[string]string{"topology.kubernetes.io/zone": "z1"},
		Addresses: []string{lab.NodeIPv4}}.YAML())
	close := policyWeb("close", 30, fixture.Endpoint{Pod: 1, Node: otherNodeName, Zone: "z1"},
		fixture.Endpoint{Pod: 2, Node: otherNodeName, Zone: "z2"}, fixture.Endpoint{Pod: 3, Node: otherNodeName, Zone: "z1"})
	close.Edit = func(s *corev1.Service) {
		s.Spec.TrafficDistribution = ptrTo(corev1.ServiceTrafficDistributionPreferClose)
	}
	hinted := policyWeb("hinted", 31, fixture.Endpoint{Pod: 1, Node: otherNodeName, Zone: "z1", Hints: []string{"z2"}},
		fixture.Endpoint{Pod: 2, Node: otherNodeName, Zone: "z2", Hints: []string{"z1"}})
	elsewhere := policyWeb("elsewhere", 32, fixture.Endpoint{Pod: 1, Node: otherNodeName, Zone: "z2", Hints: []string{"z2"}},
		fixture.Endpoint{Pod: 2, Node: otherNodeName, Zone: "z3", Hints: []string{"z3"}})
	for _, s := range []fixture.Service{close, hinted, elsewhere} {
		e.write(s)
	}
	rendered, err := exec.Command(daemonBinary, append([]string{"render"}, tier.ManifestFlags(e.dir)...)...).Output()
	if err != nil {
		t.Fatalf("nftproxy render: %v", err)
	}
	if out, err := e.lab.Node.RunStdin(string(rendered), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft -f of the render output: %v\n%s", err, out)
	}
	pod4 := e.lab.Pod(4)
	for _, c := range []struct {
		name string
		ip   netip.Addr
		want []string
	}{
		{"PreferClose: same-zone endpoints", lab.ClusterIPv4(30), podNames(1, 3)},
		{"hints for z1", lab.ClusterIPv4(31), podNames(2)},
		{"no endpoint for z1: all", lab.ClusterIPv4(32), podNames(1, 2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := pod4.Spread(e.ctx, "tcp", hostPort(c.ip, 80), 24)
			total := 0
			for pod, n := range got.Pods {
				total += n
				if !slices.Contains(c.want, pod) {
					t.Errorf("%s answered: got %s, want only %v", pod, got, c.want)
				}
			}
			if total != 24 {
				t.Errorf("24 connections: got %s, want 24 replies", got)
			}
			if len(c.want) > 1 && len(got.Pods) < 2 {
				// 24 uniform picks miss one of two endpoints with probability 2^-23.
				t.Errorf("got %s, want replies from each of %v", got, c.want)
			}
		})
	}
}

// TestAffinityMapFull runs the daemon with --affinity-map-size 1: the first client is
// remembered and sticks; the map then refuses every other client's entry, and the kernel stops
// a rule whose update failed: in ip tables that is the recording after DNAT, never the pick, so
// every connection of theirs must still be answered, by any of the endpoints. Then an endpoint
// is removed: the remembered client's entry goes with it if it pointed there (the prune), and
// every client is still answered.
func TestAffinityMapFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Clients: 2, Pods: 4, Ports: []lab.PortSpec{lab.Port(8080)}})
	svc := policyWeb("sticky-full", 30, local(1, 2, 3)...)
	svc.Edit = func(s *corev1.Service) {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo(int32(3600))}}
	}
	e.write(svc)
	e.flags = append(e.flags, "--affinity-map-size", "1")
	e.start(svc)
	addr := hostPort(lab.ClusterIPv4(30), 80)
	pod4 := e.lab.Pod(4)
	first := pod4.Dial(e.ctx, "tcp", addr)
	if first.Outcome != lab.Replied {
		t.Fatalf("pod-4, first connection: %v", first)
	}
	if got := pod4.Spread(e.ctx, "tcp", addr, 6); got.Pods[first.Reply.Pod] != 6 {
		t.Fatalf("pod-4 (remembered): 6 more connections got %s, want all on %s", got, first.Reply.Pod)
	}
	for _, c := range []*lab.Host{e.lab.Client(1), e.lab.Client(2)} {
		got := lab.Spread(e.ctx, c.NS, "tcp", addr, 12)
		if n := got.Pods["pod-1"] + got.Pods["pod-2"] + got.Pods["pod-3"]; n != 12 {
			t.Errorf("%s with the map full: %s, want all 12 connections answered", c.IPv4, got)
		}
		if n := e.affinityEntries(c.IPv4); n != 0 {
			t.Errorf("%s: %d affinity entries in a map of size 1 that pod-4 fills", c.IPv4, n)
		}
	}

	// Remove the endpoint pod-4 is stuck to: its entry is deleted after the sync.
	var kept []fixture.Endpoint
	for _, ep := range local(1, 2, 3) {
		if fmt.Sprintf("pod-%d", ep.Pod) != first.Reply.Pod {
			kept = append(kept, ep)
		}
	}
	svc.Endpoints = kept
	e.write(svc)
	e.waitFor("pod-4's affinity entry deleted with its endpoint", func(string) bool { return e.affinityEntries(pod4.IPv4) == 0 })
	if r := pod4.Dial(e.ctx, "tcp", addr); r.Outcome != lab.Replied || r.Reply.Pod == first.Reply.Pod {
		t.Errorf("pod-4 after its endpoint %s was removed: %v, want an answer from another pod", first.Reply.Pod, r)
	}
}
