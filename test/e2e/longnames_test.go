package e2e

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// The long-name scenario: a NodePort Service at the API's name limits (namespace
// team-a, a 63-character name, a 15-character port name) made every sync fail with a comment
// over nft's 127 bytes, so nothing else on the node was programmed. Through the binary: both it
// and a neighbour are programmed and answer on their ClusterIP and node port.
func TestLongNamedNodePortService(t *testing.T) {
	long := fixture.Service{
		Name: "a" + strings.Repeat("b", 61) + "c", Namespace: "team-a", Type: "NodePort",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(50)},
		Ports:      []fixture.Port{{Name: "abcdefghijklm-o", Protocol: "TCP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1),
	}
	normal := fixture.Service{
		Name: "web", Type: "NodePort",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(51)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(2),
	}
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(8080)}}, long, normal)
	e.start(long, normal)
	var (
		client   = e.lab.Client(1)
		nodeV4   = netip.MustParseAddr(lab.NodeIPv4)
		masq4    = netip.MustParseAddr(lab.PodGatewayV4)
		longNP   = e.nodePortOf(long.Key() + "tcp/abcdefghijklm-o")
		normalNP = e.nodePortOf(normal.Key() + "tcp/http")
	)
	probes := []probe{
		{"long name, ClusterIP", client.NS, "tcp", hostPort(lab.ClusterIPv4(50), 80), replied(podNames(1), 8080, masq4)},
		{"long name, node port", client.NS, "tcp", hostPort(nodeV4, longNP), replied(podNames(1), 8080, masq4)},
		{"neighbour, ClusterIP", client.NS, "tcp", hostPort(lab.ClusterIPv4(51), 80), replied(podNames(2), 8080, masq4)},
		{"neighbour, node port", client.NS, "tcp", hostPort(nodeV4, normalNP), replied(podNames(2), 8080, masq4)},
	}
	for _, p := range probes {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			p.want.check(t, p.network+" "+p.addr, lab.Dial(e.ctx, p.from, p.network, p.addr))
		})
	}
}
