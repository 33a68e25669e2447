package e2e

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// KEP-2610's test plan, by packets: all-ports set on a running Service, unset
// again leaving its one port, an explicit "false", and all-ports with loadBalancerSourceRanges.

// TestAllPortsToggled: one running Service goes through the KEP's states. With an explicit
// all-ports "false" it is an ordinary one-port Service: its port answers, another port of its
// ClusterIP is refused (undefined port) and not forwarded on the LoadBalancer IP. The annotation set to "true" on the running Service
// opens every port of its protocols, on the ClusterIP and the LoadBalancer IP, to the pod on the
// same port. Removed again, the Service is back to its one port: the others are refused again.
// Each phase probes ports never probed before, so no conntrack entry of an earlier phase answers.
func TestAllPortsToggled(t *testing.T) {
	t.Parallel()
	const port = 80
	probe, specs := allPortsProbes(t, 6)
	specs = append(specs, lab.Port(port))
	clusterIP, lbIP := lab.ClusterIPv4(83), lab.LoadBalancerIPv4(83)
	svc := fixture.Service{Name: "toggled", Type: "LoadBalancer", ClusterIPs: []netip.Addr{clusterIP}, LoadBalancerIPs: []netip.Addr{lbIP}, Endpoints: fixture.Pods(1),
		Ports:       []fixture.Port{{Name: "tcp", Protocol: "TCP", Port: port}, {Name: "udp", Protocol: "UDP", Port: port}},
		Annotations: map[string]string{annotation.AllPortsKey: "false"}}
	e := newEnv(t, lab.Options{Pods: 1, Ports: specs}, svc)
	e.start(svc)
	masq := netip.MustParseAddr(lab.PodGatewayV4)
	c := e.lab.Client(1)
	refused := expect{outcome: lab.Refused}
	check := func(phase string, other []uint16, othersOpen bool) {
		t.Helper()
		for _, network := range []string{"tcp", "udp"} {
			for _, to := range []netip.Addr{clusterIP, lbIP} {
				replied(podNames(1), port, masq).check(t, phase+": "+network+" "+hostPort(to, port), c.Dial(e.ctx, network, hostPort(to, port)))
				for _, p := range other {
					what, r := phase+": "+network+" "+hostPort(to, p), c.Dial(e.ctx, network, hostPort(to, p))
					switch {
					case othersOpen:
						replied(podNames(1), p, masq).check(t, what, r)
					case to == clusterIP:
						refused.check(t, what, r) // an undefined port of a ClusterIP is rejected
					case r.Outcome == lab.Replied:
						// Not a Service port on the LoadBalancer IP: not forwarded (the lab
						// routes it nowhere, so it times out).
						t.Errorf("%s: got %v, want no reply", what, r)
					}
				}
			}
		}
	}
	allPortsEntry := `"default/toggled/tcp/all"`

	check(`explicit "false"`, probe[0:2], false)

	svc.Annotations = map[string]string{annotation.AllPortsKey: "true"}
	e.write(svc)
	e.waitFor("all-ports set on the running Service", func(rs string) bool { return strings.Contains(rs, allPortsEntry) })
	check(`set to "true"`, probe[2:4], true)

	svc.Annotations = nil
	e.write(svc)
	e.waitFor("all-ports unset", func(rs string) bool {
		return !strings.Contains(rs, allPortsEntry) && strings.Contains(rs, `"default/toggled/tcp/tcp`)
	})
	check("unset, leaving its port", probe[4:6], false)
}

// TestAllPortsSourceRanges: an all-ports LoadBalancer with loadBalancerSourceRanges. On the
// LoadBalancer IP an allowed source reaches the pod on any port; another source is dropped on
// every port (as upstream drops what the ranges leave out). The ranges restrict the
// LoadBalancer IP only: the other client still reaches the ClusterIP.
func TestAllPortsSourceRanges(t *testing.T) {
	t.Parallel()
	probe, specs := allPortsProbes(t, 2)
	e := newEnv(t, lab.Options{Clients: 2, Pods: 1, Ports: specs})
	c1, c2 := e.lab.Client(1), e.lab.Client(2)
	clusterIP, lbIP := lab.ClusterIPv4(84), lab.LoadBalancerIPv4(84)
	svc := fixture.Service{Name: "ranged", Type: "LoadBalancer", ClusterIPs: []netip.Addr{clusterIP}, LoadBalancerIPs: []netip.Addr{lbIP}, Endpoints: fixture.Pods(1),
		Ports:        []fixture.Port{{Name: "tcp", Protocol: "TCP", Port: 1}, {Name: "udp", Protocol: "UDP", Port: 1}},
		Annotations:  map[string]string{annotation.AllPortsKey: "true"},
		SourceRanges: []string{netip.PrefixFrom(c1.IPv4, 32).String()}}
	e.write(svc)
	e.start(svc)
	masq := netip.MustParseAddr(lab.PodGatewayV4)
	for _, p := range probe {
		for _, network := range []string{"tcp", "udp"} {
			replied(podNames(1), p, masq).check(t, "allowed source, LB IP, "+network, c1.Dial(e.ctx, network, hostPort(lbIP, p)))
			expect{outcome: lab.Timeout}.check(t, "other source, LB IP, "+network, c2.Dial(e.ctx, network, hostPort(lbIP, p)))
			replied(podNames(1), p, masq).check(t, "other source, ClusterIP, "+network, c2.Dial(e.ctx, network, hostPort(clusterIP, p)))
		}
	}
}
