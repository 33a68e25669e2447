package k8s

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// The ranged port of TestKEP1864ThroughTheAPI (inside deploy/'s block range), and where the
// barrier Services' two-port blocks go.
const (
	lbRangeFirst, lbRangeLast = 25000, 25009
	barrierBlock              = 26000
)

// TestKEP1864ThroughTheAPI walks a LoadBalancer Service through KEP-1864's
// allocateLoadBalancerNodePorts true -> false -> true with the real API server and the
// node-port block controller running, proving each step with packets from a client to the
// node's address and to the LoadBalancer IP. The Service has a single port (http, TCP 80) and
// a ranged one (rtp, UDP 25000-25009):
//
//  1. true: the API server gives http a node port, the controller gives rtp its block; both are
//     served on the node's address, and the LoadBalancer IP serves both ports.
//  2. false, nothing else changed: turning allocation off takes nothing away (the API server
//     keeps the node ports the Service names, the controller keeps the block it names), so the
//     node still serves them.
//  3. false, and the user removes every nodePort and the node-port-ranges annotation: the API
//     server does not patch a missing nodePort back while the Service allocates none, the
//     controller gives no block back, and the node stops serving them, while the LoadBalancer
//     IP (and the ClusterIP) still serve both ports.
//  4. true again: the API server allocates node ports again, the controller the block again;
//     the node serves them again.
func TestKEP1864ThroughTheAPI(t *testing.T) {
	e := newLabEnv(t, nil, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(80), lab.PortRange(lbRangeFirst-1, lbRangeLast+1)}})
	lbIP := lab.LoadBalancerIPv4(73)
	yes := true
	media := fixture.Service{Name: "media", Namespace: testNS, Type: corev1.ServiceTypeLoadBalancer,
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(73)},
		Ports: []fixture.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80},
			{Name: "rtp", Protocol: corev1.ProtocolUDP, Port: lbRangeFirst}},
		Annotations:       map[string]string{annotation.PortRangesKey: fmt.Sprintf("rtp=%d-%d", lbRangeFirst, lbRangeLast)},
		AllocateNodePorts: &yes, LoadBalancerIPs: []netip.Addr{lbIP}, Endpoints: fixture.Pods(2)}
	e.createService(media)
	// The controller starts after the load balancer's status write of createService, which it
	// would otherwise race with its annotation patch (a conflict on the Service).
	e.startAllocator()

	blockValue := fmt.Sprintf("rtp=%d-%d", lbRangeFirst, lbRangeLast)
	blockElem := fmt.Sprintf("udp . %d-%d", lbRangeFirst, lbRangeLast)
	node := netip.MustParseAddr(lab.NodeIPv4)
	p := prober{t, e}
	// served checks what stays true in every step: the LoadBalancer IP and the ClusterIP serve
	// both ports, the range to its last port.
	served := func() {
		t.Helper()
		for _, to := range []netip.Addr{lbIP, lab.ClusterIPv4(73)} {
			p.reaches("tcp", to, 80, 80, 2)
			p.reaches("udp", to, lbRangeFirst, lbRangeFirst, 2)
			p.reaches("udp", to, lbRangeLast, lbRangeLast, 2)
		}
	}
	// nodeServes checks that the node's address serves the http node port and every port of
	// the block (and not the ports just outside it).
	nodeServes := func(httpNodePort uint16) {
		t.Helper()
		p.reaches("tcp", node, httpNodePort, 80, 2)
		for _, port := range []uint16{lbRangeFirst, lbRangeFirst + 4, lbRangeLast} {
			p.reaches("udp", node, port, port, 2)
		}
		p.unanswered("udp", node, lbRangeFirst-1, "outside the node-port block")
		p.unanswered("udp", node, lbRangeLast+1, "outside the node-port block")
	}
	// nodePortsOf checks that the API server gave both ports a node port and returns http's.
	nodePortsOf := func(s *corev1.Service) uint16 {
		t.Helper()
		for _, sp := range s.Spec.Ports {
			if sp.NodePort == 0 {
				t.Fatalf("step needs node ports: the API server gave port %s none (allocateLoadBalancerNodePorts %v)",
					sp.Name, *s.Spec.AllocateLoadBalancerNodePorts)
			}
		}
		return uint16(s.Spec.Ports[0].NodePort)
	}
	programmed := func(step string, httpNodePort uint16) {
		t.Helper()
		e.waitFor(step+": http's node port and rtp's block in the node-port map", func(rs string) bool {
			m := nodePortsMap(rs)
			return strings.Contains(m, blockElem) && strings.Contains(m, fmt.Sprintf("tcp . %d ", httpNodePort))
		})
	}

	// 1. true.
	s := e.waitService(media.Name, "step 1: the allocator to record rtp's block", blockIs(blockValue))
	np1 := nodePortsOf(s)
	programmed("step 1", np1)
	served()
	nodeServes(np1)
	if t.Failed() {
		t.FailNow()
	}

	// 2. false, nothing else changed.
	s = e.updateService(media.Name, "step 2: set allocateLoadBalancerNodePorts false", func(s *corev1.Service) {
		s.Spec.AllocateLoadBalancerNodePorts = new(bool)
	})
	if got := nodePortsOf(s); got != np1 {
		t.Fatalf("step 2: the API server changed http's node port from %d to %d on turning allocation off", np1, got)
	}
	e.barrier(1)
	e.waitService(media.Name, "step 2: the block kept", blockIs(blockValue))
	served()
	nodeServes(np1)
	if t.Failed() {
		t.FailNow()
	}

	// 3. false, and the user removes what the Service holds, as kubectl edit would: every
	// nodePort, and the node-port-ranges annotation.
	s = e.updateService(media.Name, "step 3: remove the node ports and the block", func(s *corev1.Service) {
		for i := range s.Spec.Ports {
			s.Spec.Ports[i].NodePort = 0
		}
		delete(s.Annotations, annotation.NodePortRangesKey)
	})
	for _, sp := range s.Spec.Ports {
		if sp.NodePort != 0 {
			t.Fatalf("step 3: the API server kept node port %d on port %s that the update removed "+
				"(with allocateLoadBalancerNodePorts false it patches none back)", sp.NodePort, sp.Name)
		}
	}
	e.waitFor("step 3: http's node port and rtp's block gone from the node-port map", func(rs string) bool {
		m := nodePortsMap(rs)
		return strings.Contains(rs, marker(media)) && !strings.Contains(m, blockElem) && !strings.Contains(m, fmt.Sprintf("tcp . %d ", np1))
	})
	// The controller has handled the barrier, created after the update: it gave the block back
	// by now if it ever would.
	e.barrier(2)
	e.waitService(media.Name, "step 3: no block given back", blockIs(""))
	if m := nodePortsMap(e.ruleset()); strings.Contains(m, blockElem) {
		t.Fatalf("step 3: rtp's block is programmed again:\n%s", m)
	}
	served()
	p.unanswered("tcp", node, np1, "http's node port was removed")
	for _, port := range []uint16{lbRangeFirst, lbRangeFirst + 4, lbRangeLast} {
		p.unanswered("udp", node, port, "rtp's node-port block was removed")
	}
	if t.Failed() {
		t.FailNow()
	}

	// 4. true again.
	s = e.updateService(media.Name, "step 4: set allocateLoadBalancerNodePorts true", func(s *corev1.Service) {
		s.Spec.AllocateLoadBalancerNodePorts = &yes
	})
	np4 := nodePortsOf(s)
	e.waitService(media.Name, "step 4: the allocator to record rtp's block again", blockIs(blockValue))
	programmed("step 4", np4)
	served()
	nodeServes(np4)
}

// barrier creates a NodePort range Service "barrier-n" with a two-port block and waits until
// the controller recorded its block and the daemon programmed it. Both read Services in the
// order the API server wrote them, so after the barrier each has seen every earlier write: what
// they did not do by then they did not do in answer to those writes.
func (e *env) barrier(n int) {
	e.t.Helper()
	first := barrierBlock + 2*n
	b := fixture.Service{Name: fmt.Sprintf("barrier-%d", n), Namespace: testNS, Type: corev1.ServiceTypeNodePort,
		Ports:       []fixture.Port{{Name: "b", Protocol: corev1.ProtocolUDP, Port: int32(first)}},
		Annotations: map[string]string{annotation.PortRangesKey: fmt.Sprintf("b=%d-%d", first, first+1)},
		Endpoints:   fixture.Pods(1)}
	e.createService(b)
	e.waitService(b.Name, b.Name+": its block", blockIs(fmt.Sprintf("b=%d-%d", first, first+1)))
	elem := fmt.Sprintf("udp . %d-%d", first, first+1)
	e.waitFor(b.Name+": its block in the node-port map", func(rs string) bool { return strings.Contains(nodePortsMap(rs), elem) })
}
