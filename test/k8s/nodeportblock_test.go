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

// The range of TestNodePortRangeBlockFromTheAllocator, inside deploy/'s block range
// (20000-29999). The pods serve one port beyond each end, so a block programmed too wide would
// be answered.
const blockFirst, blockLast = 24000, 24009

// TestNodePortRangeBlockFromTheAllocator proves node-port blocks end to end
// in Kubernetes mode: a NodePort range Service is created through the API without a block;
// the node-port block controller (deploy/allocator's identity and block range) running against
// the same API server records its block in nftproxy.io/node-port-ranges, the daemon (the
// DaemonSet's identity) reads it, and packets to the node's address on every port of the block
// reach the endpoint on that same port, while the ports just outside it get no answer. The
// node port the API server gave the ranged port (its first port's, in 30000-32767) is not
// programmed: a ranged port's node ports are its block.
func TestNodePortRangeBlockFromTheAllocator(t *testing.T) {
	e := newLabEnv(t, nil, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.PortRange(blockFirst-1, blockLast+1)}})
	e.startAllocator()
	rtp := fixture.Service{Name: "rtp-block", Namespace: testNS, Type: corev1.ServiceTypeNodePort,
		ClusterIPs:  []netip.Addr{lab.ClusterIPv4(72)},
		Ports:       []fixture.Port{{Name: "rtp", Protocol: corev1.ProtocolUDP, Port: blockFirst}},
		Annotations: map[string]string{annotation.PortRangesKey: fmt.Sprintf("rtp=%d-%d", blockFirst, blockLast)},
		Endpoints:   fixture.Pods(1)}
	created := e.createService(rtp)
	if v, ok := created.Annotations[annotation.NodePortRangesKey]; ok {
		t.Fatalf("the Service was created with %s %q; the controller must be the one to write it", annotation.NodePortRangesKey, v)
	}
	apiNodePort := uint16(created.Spec.Ports[0].NodePort)

	want := fmt.Sprintf("rtp=%d-%d", blockFirst, blockLast)
	e.waitService(rtp.Name, "the allocator to record the block", blockIs(want))
	block := fmt.Sprintf("udp . %d-%d", blockFirst, blockLast)
	e.waitFor("the block in the node-port map", func(rs string) bool { return strings.Contains(nodePortsMap(rs), block) })

	p := prober{t, e}
	node := netip.MustParseAddr(lab.NodeIPv4)
	for _, port := range []uint16{blockFirst, blockFirst + 1, blockFirst + 5, blockLast} {
		p.reaches("udp", node, port, port, 1)
	}
	// The controls: pod-1 answers just outside the block, so the node not answering there
	// is the rules' doing.
	for _, port := range []uint16{blockFirst - 1, blockLast + 1} {
		p.reaches("udp", lab.PodIPv4(1), port, port, 1)
		p.unanswered("udp", node, port, "outside the node-port block")
	}
	p.unanswered("tcp", node, blockFirst, "the block is the UDP port's")
	if apiNodePort != 0 {
		p.unanswered("udp", node, apiNodePort, "a ranged port's node ports are its block, not spec.ports[].nodePort")
	}
}
