package conntrack

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// Address plan shared by the tests of this package: ClusterIPs from 198.19.0.0/18, LoadBalancer
// IPs from 198.19.100.0/24, external IPs from 198.19.200.0/24, pods from 198.18.128.0/24, the
// node at 198.18.0.1; IPv6 twins under fd00::/8.
var (
	clusterIP  = netip.MustParseAddr("198.19.0.1")
	clusterIP6 = netip.MustParseAddr("fd00:19::1")
	lbIP       = netip.MustParseAddr("198.19.100.1")
	extIP      = netip.MustParseAddr("198.19.200.1")
	nodeIP     = netip.MustParseAddr("198.18.0.1")
	nodeIP6    = netip.MustParseAddr("fd00::1")
	pod1       = netip.MustParseAddr("198.18.128.11")
	pod2       = netip.MustParseAddr("198.18.128.12")
	pod3       = netip.MustParseAddr("198.18.128.13")
	pod1v6     = netip.MustParseAddr("fd00:128::11")
)

var svcKey = model.ServiceKey{Namespace: "ns", Name: "svc"}

func udpName(port string) model.PortName {
	return model.PortName{Service: svcKey, Port: port, Protocol: model.UDP}
}

func ep(a netip.Addr, port uint16) model.Endpoint {
	return model.Endpoint{Addr: a, Port: port, Ready: true, Serving: true}
}

// dns is a UDP ClusterIP port 53 -> 5353 with the given endpoints.
func dns(eps ...model.Endpoint) model.ServicePort {
	return model.ServicePort{Name: udpName("dns"), Port: 53, PortEnd: 53, TargetPort: 5353,
		ClusterIPs: []netip.Addr{clusterIP}, Endpoints: eps}
}

func svc(ports ...model.ServicePort) *model.Service {
	return &model.Service{Key: svcKey, Ports: ports}
}

func with(sp model.ServicePort, f func(*model.ServicePort)) model.ServicePort {
	f(&sp)
	return sp
}

func fe(a netip.Addr, first, last uint16) Frontend {
	return Frontend{Addr: a, First: first, Last: last}
}

func keepOf(pairs ...any) []netip.AddrPort {
	var out []netip.AddrPort
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, netip.AddrPortFrom(pairs[i].(netip.Addr), uint16(pairs[i+1].(int))))
	}
	return out
}

func TestTargets(t *testing.T) {
	rtp := model.ServicePort{Name: udpName("rtp"), Port: 16384, PortEnd: 16483,
		ClusterIPs: []netip.Addr{clusterIP}, NodePort: 40100, NodePortEnd: 40199,
		Endpoints: []model.Endpoint{ep(pod1, 0), ep(pod2, 0)}}
	any := model.ServicePort{Name: model.PortName{Service: svcKey, Port: model.AllPortsName, Protocol: model.UDP},
		AllPorts: true, ClusterIPs: []netip.Addr{clusterIP}, LoadBalancerIPs: []netip.Addr{lbIP},
		NodePort: 30001, Endpoints: []model.Endpoint{ep(pod1, 0), ep(pod2, 0)}}
	tcp := with(dns(ep(pod1, 5353)), func(p *model.ServicePort) {
		p.Name.Protocol = model.TCP
		p.Name.Port = "dns-tcp"
	})
	nodePort := with(dns(ep(pod1, 5353), ep(pod2, 5353)), func(p *model.ServicePort) { p.NodePort = 30053 })

	tests := []struct {
		name      string
		nodeAddrs []netip.Addr
		changes   []Change
		want      []Target
	}{
		{name: "new service: every frontend, flows from before it existed go",
			changes: []Change{{New: svc(dns(ep(pod1, 5353)))}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod1, 5353)}}},
		{name: "new service without endpoints still cleans its frontends",
			changes: []Change{{New: svc(dns())}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}}}},
		{name: "tcp only: nothing",
			changes: []Change{{Old: svc(tcp), New: svc(with(tcp, func(p *model.ServicePort) { p.Endpoints = nil }))}}},
		{name: "unchanged: nothing",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353))), New: svc(dns(ep(pod1, 5353)))}}},
		{name: "endpoint added: nothing stale",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353))), New: svc(dns(ep(pod1, 5353), ep(pod2, 5353)))}}},
		{name: "endpoint removed: keep the rest",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353), ep(pod2, 5353))), New: svc(dns(ep(pod2, 5353)))}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod2, 5353)}}},
		{name: "first endpoint: flows sent while there was none go",
			changes: []Change{{Old: svc(dns()), New: svc(dns(ep(pod1, 5353)))}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod1, 5353)}}},
		{name: "last endpoint removed: nothing to keep",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353))), New: svc(dns())}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}}}},
		{name: "terminating but serving endpoint stays",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353))), New: svc(dns(model.Endpoint{Addr: pod1, Port: 5353, Serving: true, Terminating: true}))}}},
		{name: "endpoint stops serving",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353), ep(pod2, 5353))), New: svc(dns(model.Endpoint{Addr: pod1, Port: 5353, Terminating: true}, ep(pod2, 5353)))}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod2, 5353)}}},
		{name: "target port changed: same pods, old port stale",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353))), New: svc(dns(ep(pod1, 5354)))}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod1, 5354)}}},
		{name: "service deleted: every frontend, nothing kept",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353)))}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}}}},
		{name: "service rejected: like deleted",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353))), New: &model.Service{Key: svcKey, Rejected: &model.Rejection{Reason: "x"}}}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}}}},
		{name: "load balancer IP removed: its flows go, the ClusterIP's are checked",
			changes: []Change{{
				Old: svc(with(dns(ep(pod1, 5353)), func(p *model.ServicePort) { p.LoadBalancerIPs = []netip.Addr{lbIP} })),
				New: svc(dns(ep(pod1, 5353)))}},
			want: []Target{
				{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod1, 5353)},
				{Port: udpName("dns"), Frontends: []Frontend{fe(lbIP, 53, 53)}}}},
		{name: "external IP added: flows to it from before go",
			changes: []Change{{
				Old: svc(dns(ep(pod1, 5353))),
				New: svc(with(dns(ep(pod1, 5353)), func(p *model.ServicePort) { p.ExternalIPs = []netip.Addr{extIP} }))}},
			want: []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53), fe(extIP, 53, 53)}, Keep: keepOf(pod1, 5353)}}},
		{name: "port renamed: old name's frontends go unless the new port keeps them",
			changes: []Change{{Old: svc(dns(ep(pod1, 5353))), New: svc(with(dns(ep(pod1, 5353)), func(p *model.ServicePort) { p.Name = udpName("domain") }))}},
			want: []Target{
				{Port: udpName("domain"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod1, 5353)},
				{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}}}},
		{name: "range: endpoint removed, whole range and node-port block, any port of kept pods",
			changes: []Change{{Old: svc(rtp), New: svc(with(rtp, func(p *model.ServicePort) { p.Endpoints = p.Endpoints[1:] }))}},
			want: []Target{{Port: udpName("rtp"), Frontends: []Frontend{fe(clusterIP, 16384, 16483), fe(netip.Addr{}, 40100, 40199)},
				Keep: keepOf(pod2, 0)}}},
		{name: "range shrunk: the cut ports go",
			changes: []Change{{Old: svc(rtp), New: svc(with(rtp, func(p *model.ServicePort) { p.PortEnd = 16433; p.NodePortEnd = 40149 }))}},
			want: []Target{
				{Port: udpName("rtp"), Frontends: []Frontend{fe(clusterIP, 16384, 16433), fe(netip.Addr{}, 40100, 40149)}, Keep: keepOf(pod1, 0, pod2, 0)},
				{Port: udpName("rtp"), Frontends: []Frontend{fe(clusterIP, 16384, 16483), fe(netip.Addr{}, 40100, 40199)}}}},
		{name: "all-ports: every port of ClusterIP and LB IP, never a node port",
			changes: []Change{{Old: svc(any), New: svc(with(any, func(p *model.ServicePort) { p.Endpoints = p.Endpoints[:1] }))}},
			want:    []Target{{Port: any.Name, Frontends: []Frontend{fe(clusterIP, 0, 65535), fe(lbIP, 0, 65535)}, Keep: keepOf(pod1, 0)}}},
		{name: "node port on any address when node addresses are not given",
			changes: []Change{{Old: svc(nodePort), New: svc(with(nodePort, func(p *model.ServicePort) { p.Endpoints = p.Endpoints[:1] }))}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53), fe(netip.Addr{}, 30053, 30053)}, Keep: keepOf(pod1, 5353)}}},
		{name: "node port on each node address",
			nodeAddrs: []netip.Addr{nodeIP, nodeIP6},
			changes:   []Change{{Old: svc(nodePort), New: svc(with(nodePort, func(p *model.ServicePort) { p.Endpoints = p.Endpoints[:1] }))}},
			want: []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53), fe(nodeIP, 30053, 30053), fe(nodeIP6, 30053, 30053)},
				Keep: keepOf(pod1, 5353)}}},
		{name: "node port removed (type changed to ClusterIP)",
			nodeAddrs: []netip.Addr{nodeIP},
			changes:   []Change{{Old: svc(nodePort), New: svc(with(nodePort, func(p *model.ServicePort) { p.NodePort = 0 }))}},
			want: []Target{
				{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod1, 5353, pod2, 5353)},
				{Port: udpName("dns"), Frontends: []Frontend{fe(nodeIP, 30053, 30053)}}}},
		{name: "dual stack: both families' frontends and endpoints",
			changes: []Change{{New: svc(with(dns(ep(pod1, 5353), ep(pod1v6, 5353)), func(p *model.ServicePort) {
				p.ClusterIPs = []netip.Addr{clusterIP, clusterIP6}
			}))}},
			want: []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53), fe(clusterIP6, 53, 53)},
				Keep: keepOf(pod1, 5353, pod1v6, 5353)}}},
		{name: "only the UDP port of a mixed service",
			changes: []Change{{Old: svc(tcp, dns(ep(pod1, 5353))), New: svc(with(tcp, func(p *model.ServicePort) { p.Endpoints = nil }), dns())}},
			want:    []Target{{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}}}},
		{name: "several changes",
			changes: []Change{
				{Old: svc(dns(ep(pod1, 5353), ep(pod3, 5353))), New: svc(dns(ep(pod1, 5353)))},
				{Old: &model.Service{Key: model.ServiceKey{Namespace: "ns", Name: "other"}, Ports: []model.ServicePort{rtp}}},
			},
			want: []Target{
				{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod1, 5353)},
				{Port: udpName("rtp"), Frontends: []Frontend{fe(clusterIP, 16384, 16483), fe(netip.Addr{}, 40100, 40199)}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Targets(tc.nodeAddrs, tc.changes)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Targets:\ngot  %s\nwant %s", dumpTargets(got), dumpTargets(tc.want))
			}
		})
	}
}

func dumpTargets(ts []Target) string {
	if len(ts) == 0 {
		return "(none)"
	}
	var b strings.Builder
	for _, t := range ts {
		fmt.Fprintf(&b, "\n  %s:", t.Port)
		for _, f := range t.Frontends {
			fmt.Fprintf(&b, " %v:%d-%d", f.Addr, f.First, f.Last)
		}
		fmt.Fprintf(&b, " keep %v", t.Keep)
	}
	return b.String()
}

func TestFrontendContains(t *testing.T) {
	tests := []struct {
		f    Frontend
		dst  netip.Addr
		port uint16
		want bool
	}{
		{fe(clusterIP, 100, 199), clusterIP, 99, false},
		{fe(clusterIP, 100, 199), clusterIP, 100, true},
		{fe(clusterIP, 100, 199), clusterIP, 199, true},
		{fe(clusterIP, 100, 199), clusterIP, 200, false},
		{fe(clusterIP, 100, 199), lbIP, 150, false},
		{fe(netip.Addr{}, 30000, 30000), lbIP, 30000, true},
		{fe(netip.Addr{}, 30000, 30000), nodeIP6, 30000, true},
		{fe(clusterIP, 0, 65535), clusterIP, 65535, true},
	}
	for _, tc := range tests {
		if got := tc.f.Contains(tc.dst, tc.port); got != tc.want {
			t.Errorf("%+v.Contains(%v, %d) = %v, want %v", tc.f, tc.dst, tc.port, got, tc.want)
		}
	}
}
