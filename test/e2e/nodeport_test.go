package e2e

import (
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// The node-port scenario: a UDP range Service of type NodePort gets an identity node-port block
// and a TCP NodePort Service without a nodePort gets one from the dynamic band. The assignment
// is made by the daemon itself (manifest mode is its own control plane, proxy/nodeport), kept
// across a restart through --state-dir, and packets prove it at the block's edges.
const (
	npRangeStart, npRangeEnd = 20500, 20509
)

func nodePortServices() []fixture.Service {
	return []fixture.Service{
		{
			Name: "media", Namespace: "voip", Type: "NodePort",
			ClusterIPs:  []netip.Addr{lab.ClusterIPv4(20)},
			Ports:       []fixture.Port{{Name: "rtp", Protocol: "UDP", Port: npRangeStart}},
			Annotations: map[string]string{annotation.PortRangesKey: "rtp=20500-20509"},
			Endpoints:   fixture.Pods(2),
		},
		{
			Name: "dyn", Type: "NodePort",
			ClusterIPs: []netip.Addr{lab.ClusterIPv4(21)},
			Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}},
			Endpoints:  fixture.Pods(1),
		},
	}
}

// nodePortOf reads from the node's ruleset the node port the daemon assigned to a Service port
// ("ns/name/proto/port"), failing the test if there is none.
func (e *env) nodePortOf(portName string) uint16 {
	e.t.Helper()
	re := regexp.MustCompile(`(tcp|udp) \. (\d+) comment "` + regexp.QuoteMeta(portName) + `"`)
	nodePorts, err := e.lab.Nft("list", "map", "ip", "nftproxy", "service-nodeports")
	if err != nil {
		e.t.Fatal(err)
	}
	m := re.FindStringSubmatch(nodePorts)
	if m == nil {
		e.t.Fatalf("no node port for %s in the node-port map:\n%s", portName, nodePorts)
	}
	p, err := strconv.Atoi(m[2])
	if err != nil {
		e.t.Fatal(err)
	}
	return uint16(p)
}

func TestNodePorts(t *testing.T) {
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(8080), lab.PortRange(npRangeStart-1, npRangeEnd+1)}})
	e.flags = []string{"--state-dir", t.TempDir()}
	svcs := nodePortServices()
	for _, s := range svcs {
		e.write(s)
	}
	e.start(svcs...)
	// The daemon is its own control plane: the block is the range itself, the other port comes
	// from the dynamic band.
	if !strings.Contains(e.ruleset(), `udp . 20500-20509 comment "voip/media/udp/rtp"`) {
		t.Fatalf("no identity node-port block 20500-20509 for voip/media in the ruleset:\n%s", e.ruleset())
	}
	dynPort := e.nodePortOf("default/dyn/tcp/http")
	if band := allocator.MustParseRange(policy.DefaultNodePortRange).DynamicBand(); !band.Contains(int(dynPort)) {
		t.Fatalf("dyn: got node port %d, want one of the dynamic band %s", dynPort, band)
	}
	// A restart with the same --state-dir keeps the assignment.
	e.stop()
	e.start(svcs...)
	if again := e.nodePortOf("default/dyn/tcp/http"); again != dynPort {
		t.Fatalf("after a restart with the same --state-dir the node port moved from %d to %d", dynPort, again)
	}

	var (
		client  = e.lab.Client(1)
		nodeV4  = netip.MustParseAddr(lab.NodeIPv4)
		masq4   = netip.MustParseAddr(lab.PodGatewayV4)
		refused = expect{outcome: lab.Refused}
	)
	// The pods serve one port beyond each edge of the block too, so a wrongly forwarded edge
	// would be answered by pod-2 instead of refused by the node.
	probes := []probe{
		{"block start-1 not forwarded", client.NS, "udp", hostPort(nodeV4, npRangeStart-1), refused},
		{"block start", client.NS, "udp", hostPort(nodeV4, npRangeStart), replied(podNames(2), npRangeStart, masq4)},
		{"block middle", client.NS, "udp", hostPort(nodeV4, 20505), replied(podNames(2), 20505, masq4)},
		{"block end", client.NS, "udp", hostPort(nodeV4, npRangeEnd), replied(podNames(2), npRangeEnd, masq4)},
		{"block end+1 not forwarded", client.NS, "udp", hostPort(nodeV4, npRangeEnd+1), refused},
		{"block tcp not a protocol of it", client.NS, "tcp", hostPort(nodeV4, npRangeStart), refused},
		{"dynamic node port tcp", client.NS, "tcp", hostPort(nodeV4, dynPort), replied(podNames(1), 8080, masq4)},
	}
	for _, p := range probes {
		t.Run(p.name+" "+p.addr, func(t *testing.T) {
			t.Parallel()
			p.want.check(t, p.network+" "+p.addr, lab.Dial(e.ctx, p.from, p.network, p.addr))
		})
	}
}
