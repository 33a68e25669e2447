package e2e

import (
	"math/rand/v2"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// The node-address guard scenario: Services that name the node's
// own addresses, through the daemon binary, proven by packets. The node runs its own identity
// server ("node") on SSH's port 22, the kubelet's 10250 and a random port, on its primary
// addresses (in the Node object) and on its client-link addresses (only the kernel knows them).
// pod-1 serves the same ports, so whatever is wrongly forwarded is answered by pod-1, and whatever
// is wrongly refused is refused: only the node answering passes.
const (
	guardSSH, guardKubelet  = 22, 10250
	guardServiceLBPort      = 8088
	guardSIPPort            = 5060
	guardBlockFirst         = 10240 // a user-written block over the kubelet's port
	guardBlockLast          = 10260
	guardSourceRangeLBIndex = 61
	guardShadowNodePort     = 30088
)

func guardServices(c1, c2 *lab.Host) []fixture.Service {
	v4v6 := func(n int) []netip.Addr { return []netip.Addr{lab.ClusterIPv4(n), lab.ClusterIPv6(n)} }
	nodeV4, nodeV6 := netip.MustParseAddr(lab.NodeIPv4), netip.MustParseAddr(lab.NodeIPv6)
	anyPort := []fixture.Port{{Name: "tcp", Protocol: "TCP", Port: 1}, {Name: "udp", Protocol: "UDP", Port: 1}}
	return []fixture.Service{
		// Finding 1: an all-ports LoadBalancer whose ingress IPs are the node's own addresses.
		{Name: "takeover", Type: "LoadBalancer", ClusterIPs: v4v6(60), Ports: anyPort, Endpoints: fixture.Pods(1),
			Annotations: map[string]string{annotation.AllPortsKey: "true"}, LoadBalancerIPs: []netip.Addr{nodeV4, nodeV6}},
		// A whole-port-space range on external IPs that are node addresses the Node object does
		// not list (client-1's link): the kernel's addresses count too.
		{Name: "range", ClusterIPs: v4v6(62), Ports: []fixture.Port{{Name: "p", Protocol: "TCP", Port: 1}}, Endpoints: fixture.Pods(1),
			Annotations: map[string]string{annotation.PortRangesKey: "p=1-65535"}, ExternalIPs: []netip.Addr{c1.GatewayV4, c1.GatewayV6}},
		// The lock-out: all-ports without endpoints on client-2's link addresses would refuse
		// every connection to them.
		{Name: "lockout", Type: "LoadBalancer", ClusterIPs: v4v6(63), Ports: anyPort,
			Annotations: map[string]string{annotation.AllPortsKey: "true"}, LoadBalancerIPs: []netip.Addr{c2.GatewayV4, c2.GatewayV6}},
		// Finding 7: a user-written identity block over the kubelet's port.
		{Name: "kubelet-block", Type: "NodePort", ClusterIPs: v4v6(64), Endpoints: fixture.Pods(1),
			Ports:       []fixture.Port{{Name: "k", Protocol: "TCP", Port: guardBlockFirst}},
			Annotations: map[string]string{annotation.PortRangesKey: "k=10240-10260", annotation.NodePortRangesKey: "k=10240-10260"}},
		// What keeps working: a single port on the node's address (k3s ServiceLB). Its name sorts
		// after "takeover", so without the guard takeover would win their conflict and take the node.
		{Name: "web-lb", Type: "LoadBalancer", ClusterIPs: v4v6(65), Endpoints: fixture.Pods(1),
			Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: guardServiceLBPort}}, LoadBalancerIPs: []netip.Addr{nodeV4}},
		// Finding 3: a one-port range.
		{Name: "sip", ClusterIPs: v4v6(66), Endpoints: fixture.Pods(1), Ports: []fixture.Port{{Name: "sip", Protocol: "UDP", Port: guardSIPPort}},
			Annotations: map[string]string{annotation.PortRangesKey: "sip=5060-5060"}},
		// Finding 8: a source range padded with spaces (the API server accepts it).
		{Name: "padded", Type: "LoadBalancer", ClusterIPs: v4v6(67), Endpoints: fixture.Pods(1),
			Ports:           []fixture.Port{{Name: "http", Protocol: "TCP", Port: guardServiceLBPort}},
			LoadBalancerIPs: []netip.Addr{lab.LoadBalancerIPv4(guardSourceRangeLBIndex)},
			SourceRanges:    []string{" " + netip.PrefixFrom(c1.IPv4, 32).String() + " "}},
	}
}

func TestNodeAddressGuard(t *testing.T) {
	t.Parallel()
	random := uint16(40000 + rand.IntN(9000))
	t.Logf("random node port probed: %d", random)
	podPorts := []lab.PortSpec{lab.Port(guardSSH), lab.Port(guardKubelet), lab.Port(random), lab.Port(guardServiceLBPort), lab.Port(guardSIPPort)}
	e := newEnv(t, lab.Options{Clients: 2, Pods: 1, Ports: podPorts})
	l := e.lab
	c1, c2 := l.Client(1), l.Client(2)
	svcs := guardServices(c1, c2)
	for _, s := range svcs {
		e.write(s)
	}
	// The block is the kind a user writes in Kubernetes mode; the old default block range lets
	// manifest mode's assigner grant it, so the model's own check is what is tested.
	e.flags = []string{"--range-node-port-range", "1024-29999"}

	nodeV4, nodeV6 := netip.MustParseAddr(lab.NodeIPv4), netip.MustParseAddr(lab.NodeIPv6)
	nodeAddrs := []netip.Addr{nodeV4, nodeV6, c1.GatewayV4, c1.GatewayV6, c2.GatewayV4, c2.GatewayV6}
	nodeSrv, err := lab.Serve(l.Node, "node", nodeAddrs,
		[]lab.PortSpec{{Proto: "tcp", First: guardSSH}, {Proto: "tcp", First: guardKubelet}, lab.Port(random)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nodeSrv.Close)
	type nodeProbe struct {
		name    string
		from    *lab.Host // nil: the node itself
		network string
		addr    netip.Addr
		port    uint16
	}
	nodeProbes := []nodeProbe{
		{"all-ports LB on the node's IPv4: ssh", c1, "tcp", nodeV4, guardSSH},
		{"all-ports LB on the node's IPv4: kubelet", c1, "tcp", nodeV4, guardKubelet},
		{"all-ports LB on the node's IPv4: random tcp", c1, "tcp", nodeV4, random},
		{"all-ports LB on the node's IPv4: random udp", c1, "udp", nodeV4, random},
		{"all-ports LB on the node's IPv6: ssh", c1, "tcp", nodeV6, guardSSH},
		{"all-ports LB on the node's IPv6: random udp", c1, "udp", nodeV6, random},
		{"all-ports LB: the node's own traffic to its ssh", nil, "tcp", nodeV4, guardSSH},
		{"all-ports LB: the node's own traffic over IPv6", nil, "tcp", nodeV6, guardSSH},
		{"range on a kernel-only node address: ssh", c1, "tcp", c1.GatewayV4, guardSSH},
		{"range on a kernel-only node address: random", c1, "tcp", c1.GatewayV4, random},
		{"range on a kernel-only node IPv6: ssh", c1, "tcp", c1.GatewayV6, guardSSH},
		{"all-ports without endpoints: ssh not locked out", c2, "tcp", c2.GatewayV4, guardSSH},
		{"all-ports without endpoints: IPv6 not locked out", c2, "tcp", c2.GatewayV6, guardSSH},
		// Node ports are served on the Node object's addresses; the all-ports LB there is refused
		// too, and the ruleset check above shows the block itself is not programmed.
		{"node-port block over the kubelet's port", c1, "tcp", nodeV6, guardKubelet},
	}
	dial := func(p nodeProbe) lab.Result {
		if p.from == nil {
			return lab.Dial(e.ctx, l.Node, p.network, hostPort(p.addr, p.port))
		}
		return p.from.Dial(e.ctx, p.network, hostPort(p.addr, p.port))
	}
	// Control: before the daemon runs the node answers, so each probe below can fail.
	for _, p := range nodeProbes {
		if r := dial(p); r.Outcome != lab.Replied || r.Reply.Pod != "node" {
			t.Fatalf("control before the daemon runs: %s: got %v, want a reply from the node", p.name, r)
		}
	}

	// Every file is loaded before the first sync, so once sip is programmed all is (waiting for
	// the others would stop the test before its probes where they are not served).
	e.start(svcs[5])
	// The rejected Services are in the log with their reasons.
	wantLog := map[string]string{"default/takeover": "NodeAddressRange", "default/range": "NodeAddressRange",
		"default/lockout": "NodeAddressRange", "default/kubelet-block": "ReservedPort"}
	deadline := time.Now().Add(programTimeout)
	for svc, reason := range wantLog {
		for !logHasRejection(e.daemon.Output(), svc, reason) && time.Now().Before(deadline) {
			time.Sleep(pollInterval)
		}
		if !logHasRejection(e.daemon.Output(), svc, reason) {
			t.Errorf("the daemon did not log %s rejected with %s", svc, reason)
		}
	}
	rs := e.ruleset()
	for _, s := range svcs[:4] {
		if containsKey(rs, s) {
			t.Errorf("the ruleset names %s, which must be rejected:\n%s", s.Key(), rs)
		}
	}

	for _, p := range nodeProbes {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			if r := dial(p); r.Outcome != lab.Replied || r.Reply.Pod != "node" || r.Reply.Port != p.port {
				t.Errorf("%s %s: got %v, want the node's own server on port %d", p.network, hostPort(p.addr, p.port), r, p.port)
			}
		})
	}
	masq4 := netip.MustParseAddr(lab.PodGatewayV4)
	for _, p := range []probe{
		{"ServiceLB: single port on the node's address still served", c1.NS, "tcp", hostPort(nodeV4, guardServiceLBPort), replied(podNames(1), guardServiceLBPort, masq4)},
		{"one-port range reaches its pod v4", c1.NS, "udp", hostPort(lab.ClusterIPv4(66), guardSIPPort), replied(podNames(1), guardSIPPort, masq4)},
		{"one-port range reaches its pod v6", c1.NS, "udp", hostPort(lab.ClusterIPv6(66), guardSIPPort), replied(podNames(1), guardSIPPort, netip.MustParseAddr(lab.PodGatewayV6))},
		{"padded source range: allowed client served", c1.NS, "tcp", hostPort(lab.LoadBalancerIPv4(guardSourceRangeLBIndex), guardServiceLBPort), replied(podNames(1), guardServiceLBPort, masq4)},
		{"padded source range: other client dropped", c2.NS, "tcp", hostPort(lab.LoadBalancerIPv4(guardSourceRangeLBIndex), guardServiceLBPort), expect{outcome: lab.Timeout}},
	} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			p.want.check(t, p.network+" "+p.addr, lab.Dial(e.ctx, p.from, p.network, p.addr))
		})
	}

	t.Run("render lists the rejections", func(t *testing.T) {
		args := append([]string{"render"}, tier.ManifestFlags(e.dir)...)
		out, err := exec.Command(daemonBinary, append(args, "--range-node-port-range", "1024-29999")...).Output()
		if err != nil {
			t.Fatalf("nftproxy render: %v", err)
		}
		// render knows the node's addresses from the Node manifest only: the Services on the
		// client links are not node addresses there.
		for _, want := range []string{"# rejected service default/takeover (NodeAddressRange)", "# rejected service default/kubelet-block (ReservedPort)"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("render output lacks %q:\n%s", want, out)
			}
		}
	})
}

// logHasRejection reports whether the daemon logged svc rejected with reason.
func logHasRejection(out, svc, reason string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "service rejected") && strings.Contains(line, `"`+svc+`"`) && strings.Contains(line, `"`+reason+`"`) {
			return true
		}
	}
	return false
}

// TestNodeAddressGuardFollowsKernel: the daemon follows the addresses the kernel holds. An
// all-ports LoadBalancer on an ordinary VIP is served; when the node takes the VIP as its own
// address (a VIP moving to this node), the Service is rejected within the sync period and the
// node's own server answers on the VIP; when the address goes, the Service is served again.
func TestNodeAddressGuardFollowsKernel(t *testing.T) {
	t.Parallel()
	random := uint16(40000 + rand.IntN(9000))
	vip := lab.LoadBalancerIPv4(70)
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{lab.Port(guardSSH), lab.Port(random)}})
	l, c1 := e.lab, e.lab.Client(1)
	svc := fixture.Service{Name: "vip", Type: "LoadBalancer", ClusterIPs: []netip.Addr{lab.ClusterIPv4(70)}, Endpoints: fixture.Pods(1),
		Ports:       []fixture.Port{{Name: "tcp", Protocol: "TCP", Port: 1}},
		Annotations: map[string]string{annotation.AllPortsKey: "true"}, LoadBalancerIPs: []netip.Addr{vip}}
	e.write(svc)
	e.start(svc)
	if r := c1.Dial(e.ctx, "tcp", hostPort(vip, random)); r.Outcome != lab.Replied || r.Reply.Pod != "pod-1" {
		t.Fatalf("all-ports on an ordinary VIP: got %v, want pod-1", r)
	}

	if _, err := l.Node.Run("ip", "address", "add", vip.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	nodeSrv, err := lab.Serve(l.Node, "node", []netip.Addr{vip}, []lab.PortSpec{{Proto: "tcp", First: guardSSH}, {Proto: "tcp", First: random}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nodeSrv.Close)
	e.waitFor("the VIP's Service rejected once the node holds the VIP", func(rs string) bool { return !containsKey(rs, svc) })
	for _, port := range []uint16{guardSSH, random} {
		if r := c1.Dial(e.ctx, "tcp", hostPort(vip, port)); r.Outcome != lab.Replied || r.Reply.Pod != "node" {
			t.Errorf("VIP held by the node, port %d: got %v, want the node's own server", port, r)
		}
	}
	if !logHasRejection(e.daemon.Output(), "default/vip", "NodeAddressRange") {
		t.Errorf("the daemon did not log default/vip rejected with NodeAddressRange")
	}

	nodeSrv.Close()
	if _, err := l.Node.Run("ip", "address", "del", vip.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	e.waitProgrammed(svc)
	if r := c1.Dial(e.ctx, "tcp", hostPort(vip, random)); r.Outcome != lab.Replied || r.Reply.Pod != "pod-1" {
		t.Errorf("VIP released by the node: got %v, want pod-1 again", r)
	}
}

// TestNodePortNotShadowed: a single port on a LoadBalancer IP that is the node's address, equal to
// another Service's node port, would shadow that node port (LoadBalancer IPs are matched before
// node ports). It is a conflict: the older Service keeps the port (by name here, the manifests
// carry no timestamps); the other loses that port on the node address only (ServiceConflict, in
// part) and its ClusterIP keeps serving it.
func TestNodePortNotShadowed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(guardServiceLBPort), lab.Port(guardShadowNodePort)}})
	nodeV4 := netip.MustParseAddr(lab.NodeIPv4)
	owner := fixture.Service{Name: "a-node-port", Type: "NodePort", ClusterIPs: []netip.Addr{lab.ClusterIPv4(68)}, Endpoints: fixture.Pods(2),
		Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: guardServiceLBPort, NodePort: guardShadowNodePort}}}
	shadow := fixture.Service{Name: "z-shadow", Type: "LoadBalancer", ClusterIPs: []netip.Addr{lab.ClusterIPv4(69)}, Endpoints: fixture.Pods(1),
		Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: guardShadowNodePort}}, LoadBalancerIPs: []netip.Addr{nodeV4}}
	e.write(owner)
	e.write(shadow)
	e.start(owner, shadow)
	masq := netip.MustParseAddr(lab.PodGatewayV4)
	want := replied(podNames(2), guardServiceLBPort, masq)
	want.check(t, "tcp node:30088", e.lab.Client(1).Dial(e.ctx, "tcp", hostPort(nodeV4, guardShadowNodePort)))
	replied(podNames(1), guardShadowNodePort, masq).check(t, "tcp shadow's ClusterIP:30088",
		e.lab.Client(1).Dial(e.ctx, "tcp", hostPort(lab.ClusterIPv4(69), guardShadowNodePort)))
	if !logHasRejection(e.daemon.Output(), "default/z-shadow", "ServiceConflict") {
		t.Errorf("the daemon did not log default/z-shadow rejected (in part) with ServiceConflict")
	}
}

// TestSinglePortsOnNodeAddress: single ports that would capture a port of the node. A
// hand-written manifest whose cluster IP is the node's own address (accepted by manifest mode
// before the guard) is rejected with NodeAddressClusterIP; a LoadBalancer whose ingress IP is the
// node's address (ServiceLB) on SSH's reserved port is rejected with ReservedPort. The node's own
// server keeps answering.
func TestSinglePortsOnNodeAddress(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{lab.Port(guardSSH), lab.Port(guardServiceLBPort)}})
	nodeV4, nodeV6 := netip.MustParseAddr(lab.NodeIPv4), netip.MustParseAddr(lab.NodeIPv6)
	sshLB := fixture.Service{Name: "ssh-lb", Type: "LoadBalancer", ClusterIPs: []netip.Addr{lab.ClusterIPv4(72)}, Endpoints: fixture.Pods(1),
		Ports: []fixture.Port{{Name: "ssh", Protocol: "TCP", Port: guardSSH}}, LoadBalancerIPs: []netip.Addr{nodeV4}}
	e.write(sshLB)
	bad := fixture.Service{Name: "on-node", ClusterIPs: []netip.Addr{nodeV6}, Endpoints: fixture.Pods(1),
		Ports: []fixture.Port{{Name: "ssh", Protocol: "TCP", Port: guardSSH}}}
	canary := fixture.Service{Name: "canary", ClusterIPs: []netip.Addr{lab.ClusterIPv6(71)}, Endpoints: fixture.Pods(1),
		Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: guardServiceLBPort}}}
	e.write(bad)
	e.write(canary)
	nodeSrv, err := lab.Serve(e.lab.Node, "node", []netip.Addr{nodeV4, nodeV6}, []lab.PortSpec{{Proto: "tcp", First: guardSSH}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nodeSrv.Close)
	e.start(canary)
	for _, s := range []fixture.Service{bad, sshLB} {
		if containsKey(e.ruleset(), s) {
			t.Errorf("the ruleset names %s, which must be rejected", s.Key())
		}
	}
	c1 := e.lab.Client(1)
	for _, a := range []netip.Addr{nodeV4, nodeV6} {
		if r := c1.Dial(e.ctx, "tcp", hostPort(a, guardSSH)); r.Outcome != lab.Replied || r.Reply.Pod != "node" {
			t.Errorf("tcp %s from outside: got %v, want the node's own server", hostPort(a, guardSSH), r)
		}
		if r := lab.Dial(e.ctx, e.lab.Node, "tcp", hostPort(a, guardSSH)); r.Outcome != lab.Replied || r.Reply.Pod != "node" {
			t.Errorf("tcp %s from the node: got %v, want the node's own server", hostPort(a, guardSSH), r)
		}
	}
	for svc, reason := range map[string]string{"default/on-node": "NodeAddressClusterIP", "default/ssh-lb": "ReservedPort"} {
		if !logHasRejection(e.daemon.Output(), svc, reason) {
			t.Errorf("the daemon did not log %s rejected with %s", svc, reason)
		}
	}
}
