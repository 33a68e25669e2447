package e2e

import (
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// TestClusterIPOnKernelAddress: an all-ports cluster IP on an address the node holds but its
// Node object does not list. The pod bridge's gateway (198.18.128.1, fd00:128::1) is such an
// address: an all-ports Service there would take every port of the node, SSH included, from
// outside, from the pods and from the node itself. It is rejected (NodeAddressRange) and the
// node's own server keeps answering there. A second all-ports Service on an ordinary cluster IP
// is served until the node takes that address onto its bridge after start: then it is rejected
// and the node answers there, and when the address goes it is served again. The daemon runs
// without --service-cidr: with it, manifest mode refuses a cluster IP outside the CIDR before
// the node could take it, and the CIDR's drop rule would drop traffic to a node address inside.
func TestClusterIPOnKernelAddress(t *testing.T) {
	t.Parallel()
	random := uint16(40000 + rand.IntN(9000))
	t.Logf("random port probed: %d", random)
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(guardSSH), lab.Port(random)}})
	l, c1, pod2 := e.lab, e.lab.Client(1), e.lab.Pod(2)
	gwV4, gwV6 := netip.MustParseAddr(lab.PodGatewayV4), netip.MustParseAddr(lab.PodGatewayV6)
	anyTCP := []fixture.Port{{Name: "tcp", Protocol: "TCP", Port: 1}}
	allPorts := map[string]string{annotation.AllPortsKey: "true"}
	gateway := fixture.Service{Name: "gateway", ClusterIPs: []netip.Addr{gwV4, gwV6}, Ports: anyTCP, Endpoints: fixture.Pods(1), Annotations: allPorts}
	lateAddrs := []netip.Addr{netip.MustParseAddr("198.18.251.1"), netip.MustParseAddr("fd00:251::1")}
	late := fixture.Service{Name: "late", ClusterIPs: lateAddrs, Ports: anyTCP,
		Endpoints: fixture.Pods(1), Annotations: allPorts}
	for _, s := range []fixture.Service{gateway, late} {
		e.write(s)
	}
	gwSrv, err := lab.Serve(l.Node, "node", []netip.Addr{gwV4, gwV6}, []lab.PortSpec{{Proto: "tcp", First: guardSSH}, {Proto: "tcp", First: random}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gwSrv.Close)

	type probe struct {
		name string
		from *lab.Host // nil: the node itself
		addr netip.Addr
		port uint16
	}
	dial := func(p probe) lab.Result {
		if p.from == nil {
			return lab.Dial(e.ctx, l.Node, "tcp", hostPort(p.addr, p.port))
		}
		return p.from.Dial(e.ctx, "tcp", hostPort(p.addr, p.port))
	}
	nodeAnswers := func(t *testing.T, when string, probes []probe) {
		t.Helper()
		for _, p := range probes {
			if r := dial(p); r.Outcome != lab.Replied || r.Reply.Pod != "node" || r.Reply.Port != p.port {
				t.Errorf("%s: %s: tcp %s: got %v, want the node's own server", when, p.name, hostPort(p.addr, p.port), r)
			}
		}
	}
	gatewayProbes := []probe{
		{"outside client to the gateway's ssh", c1, gwV4, guardSSH},
		{"outside client to the gateway's random port", c1, gwV4, random},
		{"outside client to the gateway's IPv6 ssh", c1, gwV6, guardSSH},
		{"a pod to its gateway's ssh", pod2, gwV4, guardSSH},
		{"a pod to its gateway's IPv6 ssh", pod2, gwV6, guardSSH},
		{"the node to its gateway's ssh", nil, gwV4, guardSSH},
	}
	// Control: the node answers before the daemon runs, so the probes below can fail.
	nodeAnswers(t, "before the daemon", gatewayProbes)
	if t.Failed() {
		t.FailNow()
	}

	e.flags = []string{"--service-cidr", ""}
	e.start(late)
	if rs := e.ruleset(); containsKey(rs, gateway) {
		t.Errorf("the ruleset names %s, an all-ports cluster IP on the node's bridge address:\n%s", gateway.Key(), rs)
	}
	if !logHasRejection(e.daemon.Output(), "default/gateway", "NodeAddressRange") {
		t.Errorf("the daemon did not log default/gateway rejected with NodeAddressRange")
	}
	nodeAnswers(t, "daemon running", gatewayProbes)
	if r := c1.Dial(e.ctx, "tcp", hostPort(lateAddrs[0], random)); r.Outcome != lab.Replied || r.Reply.Pod != "pod-1" {
		t.Fatalf("all-ports on an ordinary cluster IP: got %v, want pod-1", r)
	}

	// The node takes late's cluster IPs onto its bridge after start.
	for _, a := range lateAddrs {
		if _, err := l.Node.Run("ip", "address", "add", netip.PrefixFrom(a, a.BitLen()).String(), "dev", lab.BridgeName); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, a := range lateAddrs {
			_, _ = l.Node.Run("ip", "address", "del", netip.PrefixFrom(a, a.BitLen()).String(), "dev", lab.BridgeName)
		}
	})
	lateSrv, err := lab.Serve(l.Node, "node", lateAddrs, []lab.PortSpec{{Proto: "tcp", First: guardSSH}, {Proto: "tcp", First: random}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lateSrv.Close)
	e.waitFor("late rejected once the node holds its cluster IPs", func(rs string) bool { return !containsKey(rs, late) })
	nodeAnswers(t, "address added after start", []probe{
		{"outside client to ssh", c1, lateAddrs[0], guardSSH},
		{"outside client to the random port", c1, lateAddrs[0], random},
		{"outside client to IPv6 ssh", c1, lateAddrs[1], guardSSH},
		{"a pod to ssh", pod2, lateAddrs[0], guardSSH},
	})
	if !logHasRejection(e.daemon.Output(), "default/late", "NodeAddressRange") {
		t.Errorf("the daemon did not log default/late rejected with NodeAddressRange")
	}

	lateSrv.Close()
	for _, a := range lateAddrs {
		if _, err := l.Node.Run("ip", "address", "del", netip.PrefixFrom(a, a.BitLen()).String(), "dev", lab.BridgeName); err != nil {
			t.Fatal(err)
		}
	}
	e.waitProgrammed(late)
	if r := c1.Dial(e.ctx, "tcp", hostPort(lateAddrs[0], random)); r.Outcome != lab.Replied || r.Reply.Pod != "pod-1" {
		t.Errorf("address released by the node: got %v, want pod-1 again", r)
	}
}

// TestSpecialServiceAddresses: Services on addresses no Service may take are rejected and the
// traffic meant for those addresses reaches them, proven by packets: a cluster IP that is the
// cloud metadata address (the node serves it here), a LoadBalancer ingress IP 127.0.0.1 (the node
// has a listener there; the API server accepts such an ingress IP), and a hand-written cluster IP
// outside --service-cidr that is pod-2's address (manifest mode). pod-1 backs all three, so a
// hijack is answered by pod-1.
func TestSpecialServiceAddresses(t *testing.T) {
	t.Parallel()
	random := uint16(40000 + rand.IntN(9000))
	t.Logf("random port probed: %d", random)
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(80), lab.Port(random)}})
	l, pod2 := e.lab, e.lab.Pod(2)
	metadata, loopback := netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("127.0.0.1")
	port := func(p uint16) []fixture.Port { return []fixture.Port{{Name: "tcp", Protocol: "TCP", Port: int32(p)}} }
	meta := fixture.Service{Name: "metadata", ClusterIPs: []netip.Addr{metadata}, Ports: port(80), Endpoints: fixture.Pods(1)}
	loLB := fixture.Service{Name: "loopback-lb", Type: "LoadBalancer", ClusterIPs: []netip.Addr{lab.ClusterIPv4(82)}, Ports: port(random),
		Endpoints: fixture.Pods(1), LoadBalancerIPs: []netip.Addr{loopback}}
	podIP := fixture.Service{Name: "pod-ip", ClusterIPs: []netip.Addr{pod2.IPv4}, Ports: port(random), Endpoints: fixture.Pods(1)}
	canary := fixture.Service{Name: "canary", ClusterIPs: []netip.Addr{lab.ClusterIPv4(83)}, Ports: port(80), Endpoints: fixture.Pods(1)}
	for _, s := range []fixture.Service{meta, loLB, podIP, canary} {
		e.write(s)
	}
	if _, err := l.Node.Run("ip", "address", "add", metadata.String()+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	nodeSrv, err := lab.Serve(l.Node, "node", []netip.Addr{metadata, loopback}, []lab.PortSpec{{Proto: "tcp", First: 80}, {Proto: "tcp", First: random}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nodeSrv.Close)
	probes := []struct {
		name string
		from *lab.Host // nil: the node itself
		addr netip.Addr
		port uint16
		want string
	}{
		{"a pod to the metadata address", pod2, metadata, 80, "node"},
		{"the node to its loopback listener", nil, loopback, random, "node"},
		{"pod-2's own address, from the node", nil, pod2.IPv4, random, "pod-2"},
	}
	check := func(when string) {
		for _, p := range probes {
			var r lab.Result
			if p.from == nil {
				r = lab.Dial(e.ctx, l.Node, "tcp", hostPort(p.addr, p.port))
			} else {
				r = p.from.Dial(e.ctx, "tcp", hostPort(p.addr, p.port))
			}
			if r.Outcome != lab.Replied || r.Reply.Pod != p.want {
				t.Errorf("%s: %s: tcp %s: got %v, want %s", when, p.name, hostPort(p.addr, p.port), r, p.want)
			}
		}
	}
	check("before the daemon")
	if t.Failed() {
		t.FailNow()
	}
	e.start(canary)
	check("daemon running")
	rs := e.ruleset()
	for svc, reason := range map[string]string{"default/metadata": "SpecialAddress", "default/loopback-lb": "SpecialAddress",
		"default/pod-ip": "ClusterIPOutsideServiceCIDR"} {
		if !logHasRejection(e.daemon.Output(), svc, reason) {
			t.Errorf("the daemon did not log %s rejected with %s", svc, reason)
		}
	}
	for _, s := range []fixture.Service{meta, loLB, podIP} {
		if containsKey(rs, s) {
			t.Errorf("the ruleset names %s, which must be rejected", s.Key())
		}
	}
}

// TestNodeAddressInServiceCIDRAnswers: an address the node gains inside --service-cidr after the
// start (start-up refuses a CIDR holding a node address) still reaches the node's own server:
// the drop of unallocated Service addresses skips the node's addresses, so a mistaken CIDR or a
// late address never cuts the node off. The daemon logs the overlap as an error.
func TestNodeAddressInServiceCIDRAnswers(t *testing.T) {
	t.Parallel()
	port := uint16(40000 + rand.IntN(9000))
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{lab.Port(port)}})
	l, c1, pod1 := e.lab, e.lab.Client(1), e.lab.Pod(1)
	// Inside lab.ServiceCIDRv4 and lab.ServiceCIDRv6, held by no Service.
	addrs := []netip.Addr{netip.MustParseAddr("198.19.63.250"), netip.MustParseAddr("fd00:19::fffa")}
	e.start()
	e.waitFor("the unallocated-address drop programmed", func(rs string) bool {
		return strings.Contains(rs, "drop traffic to unallocated Service addresses")
	})

	for _, a := range addrs {
		// nodad: the IPv6 address is usable at once, not tentative while duplicate address
		// detection runs (the probes below come right after).
		if _, err := l.Node.Run("ip", "address", "add", netip.PrefixFrom(a, a.BitLen()).String(), "dev", lab.BridgeName, "nodad"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, a := range addrs {
			_, _ = l.Node.Run("ip", "address", "del", netip.PrefixFrom(a, a.BitLen()).String(), "dev", lab.BridgeName)
		}
	})
	srv, err := lab.Serve(l.Node, "node", addrs, []lab.PortSpec{{Proto: "tcp", First: port}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)

	for _, p := range []struct {
		name string
		from *lab.Host
		addr netip.Addr
	}{
		{"outside client", c1, addrs[0]},
		{"outside client, IPv6", c1, addrs[1]},
		{"a pod", pod1, addrs[0]},
		{"a pod, IPv6", pod1, addrs[1]},
	} {
		if r := p.from.Dial(e.ctx, "tcp", hostPort(p.addr, port)); r.Outcome != lab.Replied || r.Reply.Pod != "node" {
			t.Errorf("%s to the node's %s: got %v, want the node's own server", p.name, hostPort(p.addr, port), r)
		}
	}
	deadline := time.Now().Add(programTimeout)
	for !strings.Contains(e.daemon.Output(), "inside --service-cidr") && time.Now().Before(deadline) {
		time.Sleep(pollInterval)
	}
	if !strings.Contains(e.daemon.Output(), "inside --service-cidr") {
		t.Errorf("the daemon did not log the address gained inside --service-cidr")
	}
}
