package e2e

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// TestConflictWithholdsOnlyTheClash: two LoadBalancer Services share an
// ingress IP and both use port 443 there. The older one (by name: the manifests carry no
// timestamps) keeps 443 on the shared IP; the younger one loses only that port on that address:
// its ClusterIP still answers on 443 and 80, and its port 80 on the shared IP is still its own.
// It used to be rejected as a whole, ClusterIP included.
func TestConflictWithholdsOnlyTheClash(t *testing.T) {
	t.Parallel()
	shared := lab.LoadBalancerIPv4(90)
	older := fixture.Service{Name: "a-older", Type: "LoadBalancer", ClusterIPs: []netip.Addr{lab.ClusterIPv4(90)}, Endpoints: fixture.Pods(1),
		Ports: []fixture.Port{{Name: "https", Protocol: "TCP", Port: 443}}, LoadBalancerIPs: []netip.Addr{shared}}
	younger := fixture.Service{Name: "b-younger", Type: "LoadBalancer", ClusterIPs: []netip.Addr{lab.ClusterIPv4(91)}, Endpoints: fixture.Pods(2),
		Ports:           []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "https", Protocol: "TCP", Port: 443}},
		LoadBalancerIPs: []netip.Addr{shared}}
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(80), lab.Port(443)}}, older, younger)
	e.start(older, younger)
	masq := netip.MustParseAddr(lab.PodGatewayV4)
	c := e.lab.Client(1)
	for _, tc := range []struct {
		what string
		to   netip.Addr
		port uint16
		pod  int
	}{
		{"shared IP:443 goes to the older Service", shared, 443, 1},
		{"shared IP:80 is the younger Service's", shared, 80, 2},
		{"younger ClusterIP:443 still served", lab.ClusterIPv4(91), 443, 2},
		{"younger ClusterIP:80 still served", lab.ClusterIPv4(91), 80, 2},
		{"older ClusterIP:443", lab.ClusterIPv4(90), 443, 1},
	} {
		replied(podNames(tc.pod), tc.port, masq).check(t, tc.what, c.Dial(e.ctx, "tcp", hostPort(tc.to, tc.port)))
	}
	// Reported: a log line naming the Service, the reason and the clash.
	found := false
	for _, line := range strings.Split(e.daemon.Output(), "\n") {
		if containsAll(line, "service rejected in part", `"default/b-younger"`, `"ServiceConflict"`, shared.String()) {
			found = true
		}
	}
	if !found {
		t.Errorf("the daemon did not log default/b-younger rejected in part with ServiceConflict on %s:\n%s", shared, e.daemon.Output())
	}
}
