package e2e

import (
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
)

// Traffic policies (issue 4): externalTrafficPolicy and internalTrafficPolicy Local, ClientIP
// session affinity, loadBalancerSourceRanges, topology. The lab's pods all sit on this node's
// bridge; an endpoint counts as remote when its EndpointSlice says nodeName: node-b, which is
// all the daemon looks at.

const otherNodeName = "node-b"

// policyEndpoint is one endpoint of a policyService: a lab pod, the node the slice names, and
// its zone and hints.
type policyEndpoint struct {
	pod   int
	node  string
	zone  string
	hints []string
}

// policyService is an IPv4 Service with the policy fields the shared harness does not write.
type policyService struct {
	name, typ     string
	clusterIP     netip.Addr
	proto         string
	port, target  uint16
	nodePort      uint16
	lbIP          netip.Addr
	spec          map[string]any // extra spec fields (policies, affinity, source ranges)
	annotations   map[string]string
	endpoints     []policyEndpoint
	portName      string
	keepsPortEnds bool // a port range: the slice port has no number
}

func (s policyService) key() string { return "default/" + s.name + "/" }

func (s policyService) manifests() string {
	port := map[string]any{"name": s.portName, "protocol": s.proto, "port": s.port}
	if !s.keepsPortEnds {
		port["targetPort"] = s.target
	}
	if s.nodePort != 0 {
		port["nodePort"] = s.nodePort
	}
	typ := s.typ
	if typ == "" {
		typ = "ClusterIP"
	}
	spec := map[string]any{
		"type": typ, "clusterIP": s.clusterIP.String(), "clusterIPs": []string{s.clusterIP.String()},
		"ipFamilies": []string{"IPv4"}, "ipFamilyPolicy": "SingleStack", "ports": []any{port},
	}
	if typ == "LoadBalancer" {
		spec["allocateLoadBalancerNodePorts"] = s.nodePort != 0
	}
	for k, v := range s.spec {
		spec[k] = v
	}
	svc := map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": s.name, "namespace": "default", "annotations": s.annotations},
		"spec":     spec,
	}
	if s.lbIP.IsValid() {
		svc["status"] = map[string]any{"loadBalancer": map[string]any{"ingress": []any{map[string]string{"ip": s.lbIP.String()}}}}
	}
	var eps []any
	for _, ep := range s.endpoints {
		m := map[string]any{
			"addresses": []string{lab.PodIPv4(ep.pod).String()}, "conditions": map[string]bool{"ready": true},
			"nodeName": ep.node,
		}
		if ep.zone != "" {
			m["zone"] = ep.zone
		}
		if len(ep.hints) > 0 {
			var zs []any
			for _, z := range ep.hints {
				zs = append(zs, map[string]string{"name": z})
			}
			m["hints"] = map[string]any{"forZones": zs}
		}
		eps = append(eps, m)
	}
	slicePort := map[string]any{"name": s.portName, "protocol": s.proto}
	if !s.keepsPortEnds {
		slicePort["port"] = s.target
	}
	slice := map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata": map[string]any{"name": s.name + "-ipv4", "namespace": "default",
			"labels": map[string]string{"kubernetes.io/service-name": s.name}},
		"addressType": "IPv4", "ports": []any{slicePort}, "endpoints": eps,
	}
	return yamlDocs(svc, slice)
}

func local(pods ...int) []policyEndpoint  { return endpointsOn(nodeName, pods...) }
func remote(pods ...int) []policyEndpoint { return endpointsOn(otherNodeName, pods...) }

func endpointsOn(node string, pods ...int) []policyEndpoint {
	var out []policyEndpoint
	for _, p := range pods {
		out = append(out, policyEndpoint{pod: p, node: node})
	}
	return out
}

const (
	etpNodePort, etpRemoteNodePort = 30100, 30101
	affinitySeconds                = 3
)

func policyServices() []policyService {
	web := func(name string, n int) policyService {
		return policyService{name: name, clusterIP: lab.ClusterIPv4(n), proto: "TCP", port: 80, target: 8080, portName: "http"}
	}
	etp := web("etp", 20)
	etp.typ, etp.nodePort, etp.lbIP = "LoadBalancer", etpNodePort, lab.LoadBalancerIPv4(20)
	etp.spec = map[string]any{"externalTrafficPolicy": "Local"}
	etp.endpoints = append(local(1), remote(2)...)

	etpRemote := web("etp-remote", 21)
	etpRemote.typ, etpRemote.nodePort = "NodePort", etpRemoteNodePort
	etpRemote.spec = map[string]any{"externalTrafficPolicy": "Local"}
	etpRemote.endpoints = remote(2)

	itp := web("itp", 22)
	itp.spec = map[string]any{"internalTrafficPolicy": "Local"}
	itp.endpoints = append(local(1), remote(2, 3)...)

	itpRemote := web("itp-remote", 23)
	itpRemote.spec = map[string]any{"internalTrafficPolicy": "Local"}
	itpRemote.endpoints = remote(2)

	sticky := web("sticky", 24)
	sticky.spec = map[string]any{"sessionAffinity": "ClientIP",
		"sessionAffinityConfig": map[string]any{"clientIP": map[string]any{"timeoutSeconds": affinitySeconds}}}
	sticky.endpoints = local(1, 2, 3)

	ranged := policyService{name: "ranged", typ: "LoadBalancer", clusterIP: lab.ClusterIPv4(25), proto: "UDP",
		port: rangeStart, portName: "rtp", keepsPortEnds: true, lbIP: lab.LoadBalancerIPv4(25),
		annotations: map[string]string{"nftproxy.io/port-ranges": fmt.Sprintf("rtp=%d-%d", rangeStart, rangeEnd)},
		spec:        map[string]any{"loadBalancerSourceRanges": []string{"198.18.1.0/24"}},
		endpoints:   local(1, 2)}
	return []policyService{etp, etpRemote, itp, itpRemote, sticky, ranged}
}

// TestTrafficPolicies runs the daemon on the policy Services and probes them from an outside
// client inside the source ranges (client-1), one outside them (client-2), pod-4 and the node.
func TestTrafficPolicies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Clients: 2, Pods: 4, Ports: []lab.PortSpec{lab.Port(8080), lab.PortRange(rangeStart, rangeEnd)}})
	services := policyServices()
	for _, s := range services {
		e.writeFile(s.name+".yaml", s.manifests())
	}
	e.start()
	for _, s := range services {
		e.waitFor("Service "+s.key(), func(rs string) bool { return strings.Contains(rs, `"`+s.key()) })
	}
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
}

// testAffinity: pod-4's connections stick to the endpoint its first one reached; the kernel's
// affinity sets hold pod-4 in exactly one endpoint's set; once the timeout has passed the sets
// are empty and a new connection picks afresh (a new pick differs from the old one with
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
		t.Fatalf("pod-4 is in %d affinity sets, want 1:\n%s", n, e.ruleset())
	}
	prev := first.Reply.Pod
	for round := 1; ; round++ {
		time.Sleep(affinitySeconds*time.Second + 500*time.Millisecond)
		if n := e.affinityEntries(pod4.IPv4); n != 0 {
			t.Fatalf("after the %d s timeout pod-4 is still in %d affinity sets:\n%s", affinitySeconds, n, e.ruleset())
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

// affinityEntries counts the elements equal to a in the node's affinity sets.
func (e *env) affinityEntries(a netip.Addr) int {
	e.t.Helper()
	n := 0
	inAffinity := false
	for _, line := range strings.Split(e.ruleset(), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "set ") {
			inAffinity = strings.HasPrefix(line, "set aff-")
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
	e.writeFile("node.yaml", yamlDocs(map[string]any{
		"apiVersion": "v1", "kind": "Node",
		"metadata": map[string]any{"name": nodeName, "labels": map[string]string{"topology.kubernetes.io/zone": "z1"}},
		"status": map[string]any{"addresses": []any{
			map[string]string{"type": "InternalIP", "address": lab.NodeIPv4},
		}},
	}))
	web := func(name string, n int, eps ...policyEndpoint) policyService {
		return policyService{name: name, clusterIP: lab.ClusterIPv4(n), proto: "TCP", port: 80, target: 8080, portName: "http", endpoints: eps}
	}
	close := web("close", 30, policyEndpoint{pod: 1, node: otherNodeName, zone: "z1"},
		policyEndpoint{pod: 2, node: otherNodeName, zone: "z2"}, policyEndpoint{pod: 3, node: otherNodeName, zone: "z1"})
	close.spec = map[string]any{"trafficDistribution": "PreferClose"}
	hinted := web("hinted", 31, policyEndpoint{pod: 1, node: otherNodeName, zone: "z1", hints: []string{"z2"}},
		policyEndpoint{pod: 2, node: otherNodeName, zone: "z2", hints: []string{"z1"}})
	elsewhere := web("elsewhere", 32, policyEndpoint{pod: 1, node: otherNodeName, zone: "z2", hints: []string{"z2"}},
		policyEndpoint{pod: 2, node: otherNodeName, zone: "z3", hints: []string{"z3"}})
	for _, s := range []policyService{close, hinted, elsewhere} {
		e.writeFile(s.name+".yaml", s.manifests())
	}
	rendered, err := exec.Command(daemonBinary, append([]string{"render"}, daemonFlags(e.dir)...)...).Output()
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
				if !contains(c.want, pod) {
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

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
