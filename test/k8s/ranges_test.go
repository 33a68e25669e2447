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

// The range and the all-ports ports of TestRangeAndAllPortsThroughTheAPI. The pods serve one
// port beyond each end of the range, so a range forwarded too wide would be answered.
const (
	apiRangeFirst, apiRangeLast = 16384, 16393
	apiAnyPortA, apiAnyPortB    = 5000, 27017
)

// TestRangeAndAllPortsThroughTheAPI proves nftproxy's two port extensions in
// Kubernetes mode, written through the real API server and read by the daemon with the
// DaemonSet's own permissions: a ClusterIP range Service forwards every port of its range (and
// none beyond it) to its endpoint on the same port; an all-ports LoadBalancer forwards every
// port of its ClusterIP and of its LoadBalancer IP. That LoadBalancer leaves
// allocateLoadBalancerNodePorts at the API's default, so the API server allocates node ports
// for its placeholder ports: those are not programmed (KEP-2610: an all-ports Service has no
// node ports), which a server listening behind them on the endpoint would show.
func TestRangeAndAllPortsThroughTheAPI(t *testing.T) {
	e := newLabEnv(t, nil, lab.Options{Pods: 2, Ports: []lab.PortSpec{
		lab.PortRange(apiRangeFirst-1, apiRangeLast+1), lab.Port(apiAnyPortA), lab.Port(apiAnyPortB)}})
	rtp := fixture.Service{Name: "rtp", Namespace: testNS, ClusterIPs: []netip.Addr{lab.ClusterIPv4(70)},
		Ports:       []fixture.Port{{Name: "rtp", Protocol: corev1.ProtocolUDP, Port: apiRangeFirst}},
		Annotations: map[string]string{annotation.PortRangesKey: fmt.Sprintf("rtp=%d-%d", apiRangeFirst, apiRangeLast)},
		Endpoints:   fixture.Pods(1)}
	lbIP := lab.LoadBalancerIPv4(71)
	yes := true
	anyport := fixture.Service{Name: "anyport", Namespace: testNS, Type: corev1.ServiceTypeLoadBalancer,
		ClusterIPs:        []netip.Addr{lab.ClusterIPv4(71)},
		Ports:             []fixture.Port{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 1}, {Name: "udp", Protocol: corev1.ProtocolUDP, Port: 1}},
		Annotations:       map[string]string{annotation.AllPortsKey: "true"},
		AllocateNodePorts: &yes, LoadBalancerIPs: []netip.Addr{lbIP}, Endpoints: fixture.Pods(2)}
	e.createService(rtp)
	created := e.createService(anyport)

	// The node ports the API server gave the all-ports Service; pod-2 answers on them, so a
	// node port forwarded to it (all-ports keeps the port) would be answered.
	var nodePorts []corev1.ServicePort
	var specs []lab.PortSpec
	for _, p := range created.Spec.Ports {
		if p.NodePort == 0 {
			t.Fatalf("the API server allocated no node port for %s port %s; the test needs one", anyport.Name, p.Name)
		}
		nodePorts = append(nodePorts, p)
		specs = append(specs, lab.PortSpec{Proto: strings.ToLower(string(p.Protocol)), First: uint16(p.NodePort)})
	}
	srv, err := lab.Serve(e.lab.Pod(2).NS, e.lab.Pod(2).Name, []netip.Addr{lab.PodIPv4(2)}, specs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)

	e.waitProgrammed(rtp)
	e.waitFor("anyport on its LoadBalancer IP", func(rs string) bool {
		return strings.Contains(rs, marker(anyport)) && strings.Contains(rs, lbIP.String())
	})

	client := e.lab.Client(1)
	reaches := func(network string, to netip.Addr, port uint16, pod int) {
		t.Helper()
		addr := netip.AddrPortFrom(to, port).String()
		r := client.Dial(e.ctx, network, addr)
		if r.Outcome != lab.Replied || r.Reply.Pod != e.lab.Pod(pod).Name || r.Reply.Port != port {
			t.Errorf("%s %s: got %v, want a reply from %s on port %d", network, addr, r, e.lab.Pod(pod).Name, port)
		}
	}
	unanswered := func(network string, to netip.Addr, port uint16, why string) {
		t.Helper()
		addr := netip.AddrPortFrom(to, port).String()
		if r := client.Dial(e.ctx, network, addr); r.Outcome == lab.Replied {
			t.Errorf("%s %s: got %v, want no answer (%s)", network, addr, r, why)
		}
	}
	for _, p := range []uint16{apiRangeFirst, apiRangeFirst + 5, apiRangeLast} {
		reaches("udp", lab.ClusterIPv4(70), p, 1)
	}
	unanswered("udp", lab.ClusterIPv4(70), apiRangeFirst-1, "below the range")
	unanswered("udp", lab.ClusterIPv4(70), apiRangeLast+1, "beyond the range")
	for _, network := range []string{"tcp", "udp"} {
		for _, p := range []uint16{apiAnyPortA, apiAnyPortB} {
			reaches(network, lab.ClusterIPv4(71), p, 2)
			reaches(network, lbIP, p, 2)
		}
	}
	node := netip.MustParseAddr(lab.NodeIPv4)
	for _, p := range nodePorts {
		reaches(strings.ToLower(string(p.Protocol)), lab.PodIPv4(2), uint16(p.NodePort), 2) // the control: pod-2 answers there
		unanswered(strings.ToLower(string(p.Protocol)), node, uint16(p.NodePort), "an all-ports Service's node port is not programmed")
	}
}
