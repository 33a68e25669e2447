package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
	"github.com/nftproxy/nftproxy/test/lab"
)

// The node-port scenario: a UDP range Service of type NodePort gets an identity node-port block
// and a TCP NodePort Service without a nodePort gets one from the dynamic band. The assignment
// is made by proxy/nodeport over the loaded manifests (the daemon's own manifest-mode control
// plane), the daemon programs the result, and packets prove it at the block's edges.
const (
	npRangeStart, npRangeEnd = 16500, 16509
)

func nodePortServices() []service {
	return []service{
		{
			name: "media", namespace: "voip", typ: "NodePort",
			clusterIPs:  []netip.Addr{lab.ClusterIPv4(20)},
			ports:       []servicePort{{name: "rtp", proto: "UDP", port: npRangeStart}},
			annotations: map[string]string{annotation.PortRangesKey: "rtp=16500-16509"},
			pods:        []int{2},
		},
		{
			name: "dyn", typ: "NodePort",
			clusterIPs: []netip.Addr{lab.ClusterIPv4(21)},
			ports:      []servicePort{{name: "http", proto: "TCP", port: 80, target: 8080}},
			pods:       []int{1},
		},
	}
}

// assignNodePorts runs the node-port assigner over svcs as the daemon loads them (their
// manifests, through manifest.Load) and copies the result back: node ports into the ports,
// the node-port-ranges annotation into the annotations.
func assignNodePorts(t *testing.T, svcs []service) []service {
	t.Helper()
	staging := t.TempDir()
	for _, s := range svcs {
		if err := os.WriteFile(filepath.Join(staging, s.ns()+"-"+s.name+".yaml"), []byte(s.manifests()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	objs, ferrs := manifest.Load(staging)
	if len(ferrs) != 0 {
		t.Fatalf("load the scenario's manifests: %v", ferrs)
	}
	a, err := nodeport.New(nodeport.Config{
		NodePortRange: allocator.MustParseRange(nodeport.DefaultNodePortRange),
		BlockRange:    allocator.MustParseRange(nodeport.DefaultBlockRange),
		StateDir:      t.TempDir(),
	}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	probs, err := a.Assign(&objs, ferrs)
	if err != nil || len(probs) != 0 {
		t.Fatalf("assign node ports: got problems %v, error %v; want none", probs, err)
	}
	out := make([]service, len(svcs))
	for i, s := range svcs {
		out[i] = s
		out[i].ports = append([]servicePort(nil), s.ports...)
		for _, loaded := range objs.Services {
			if loaded.Namespace != s.ns() || loaded.Name != s.name {
				continue
			}
			for j := range out[i].ports {
				out[i].ports[j].nodePort = uint16(loaded.Spec.Ports[j].NodePort)
			}
			out[i].annotations = loaded.Annotations
		}
	}
	return out
}

func TestNodePorts(t *testing.T) {
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(8080), lab.PortRange(npRangeStart-1, npRangeEnd+1)}})
	svcs := assignNodePorts(t, nodePortServices())
	media, dyn := svcs[0], svcs[1]
	if got, want := media.annotations[annotation.NodePortRangesKey], "rtp=16500-16509"; got != want {
		t.Fatalf("media: got %s %q, want the identity block %q", annotation.NodePortRangesKey, got, want)
	}
	dynPort := dyn.ports[0].nodePort
	if band := allocator.MustParseRange(nodeport.DefaultNodePortRange).DynamicBand(); !band.Contains(int(dynPort)) {
		t.Fatalf("dyn: got node port %d, want one of the dynamic band %s", dynPort, band)
	}
	for _, s := range svcs {
		e.write(s)
	}
	e.start(svcs...)

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
		{"block middle", client.NS, "udp", hostPort(nodeV4, 16505), replied(podNames(2), 16505, masq4)},
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
