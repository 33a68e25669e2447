package ruleset

import (
	"fmt"
	"net/netip"
	"reflect"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// Address plan shared by every test here (the e2e lab uses the same one):
// node 198.18.1.1 (client side) and 198.18.128.1 (pod bridge); pods 198.18.128.0/24 inside the
// cluster CIDR 198.18.128.0/17; outside client 198.18.1.2; Services in 198.19.0.0/16.
const (
	nodeIP     = "198.18.1.1"
	nodeBridge = "198.18.128.1"
	client     = "198.18.1.2"
	pod1       = "198.18.128.10"
	pod2       = "198.18.128.11"
	pod3       = "198.18.128.12"
	webIP      = "198.19.0.10"
	rtpIP      = "198.19.0.11"
	anyIP      = "198.19.0.12"
	lbIP       = "198.19.100.1"
	extIP      = "198.19.200.1"
)

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

func ready(port uint16, ips ...string) []model.Endpoint {
	var eps []model.Endpoint
	for _, a := range addrs(ips...) {
		eps = append(eps, model.Endpoint{Addr: a, Port: port, Ready: true, Serving: true})
	}
	return eps
}

func pn(ns, name, port string, p model.Protocol) model.PortName {
	return model.PortName{Service: model.ServiceKey{Namespace: ns, Name: name}, Port: port, Protocol: p}
}

func testBuilder(t *testing.T, mut func(*Config)) *Builder {
	t.Helper()
	cfg := Config{
		Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.128.0/17")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")},
	}
	if mut != nil {
		mut(&cfg)
	}
	b, err := NewBuilder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testNode() *model.Node {
	return &model.Node{Name: "node-a", Addresses: addrs(nodeIP, nodeBridge, "127.0.0.1")}
}

// services is a small cluster covering every shape the builder knows.
func services() []*model.Service {
	web := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "web"}, Ports: []model.ServicePort{{
		Name: pn("default", "web", "http", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080, NodePort: 30080,
		ClusterIPs: addrs(webIP), LoadBalancerIPs: addrs(lbIP), ExternalIPs: addrs(extIP),
		Endpoints: append(ready(8080, pod1, pod2), model.Endpoint{Addr: netip.MustParseAddr(pod3), Port: 8080, Serving: true, Terminating: true}),
	}}}
	rtp := &model.Service{Key: model.ServiceKey{Namespace: "voip", Name: "rtp"}, Ports: []model.ServicePort{{
		Name: pn("voip", "rtp", "rtp", model.UDP), Port: 16384, PortEnd: 16483,
		ClusterIPs: addrs(rtpIP), Endpoints: ready(0, pod2),
	}}}
	all := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "any"}, Ports: []model.ServicePort{
		{Name: pn("default", "any", "", model.TCP), AllPorts: true, NodePort: 30999, ClusterIPs: addrs(anyIP), LoadBalancerIPs: addrs("198.19.100.2"), Endpoints: ready(0, pod1, pod3)},
	}}
	empty := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "empty"}, Ports: []model.ServicePort{{
		Name: pn("default", "empty", "dns", model.UDP), Port: 53, PortEnd: 53, TargetPort: 53, NodePort: 30053,
		ClusterIPs: addrs("198.19.0.13"),
	}, {
		Name: pn("default", "empty", "dns-tcp", model.TCP), Port: 53, PortEnd: 53, TargetPort: 53,
		ClusterIPs: addrs("198.19.0.13"),
	}}}
	bad := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "bad"}, Rejected: &model.Rejection{Reason: "range-end-before-start", Message: "x"}}
	return []*model.Service{web, rtp, all, empty, bad}
}

func TestTrace(t *testing.T) {
	b := testBuilder(t, nil)
	rs := b.Ruleset(testNode(), services())
	tr := newTracer(t, rs, nodeIP, nodeBridge)
	webEPs := []string{"198.18.128.10:8080", "198.18.128.11:8080"}
	cases := []struct {
		name string
		p    packet
		want outcome
	}{
		{"ClusterIP from a pod: spread over ready endpoints, not masqueraded", tcp(pod3, webIP, 80), outcome{"accept", webEPs, false}},
		{"ClusterIP from outside the cluster CIDR: masqueraded", tcp(client, webIP, 80), outcome{"accept", webEPs, true}},
		{"ClusterIP from the node itself", local(tcp(nodeIP, webIP, 80)), outcome{"accept", webEPs, true}},
		{"undefined port of a ClusterIP: TCP reset", tcp(client, webIP, 81), outcome{"reject-tcp-reset", nil, false}},
		{"undefined UDP port of a ClusterIP: ICMP", udp(client, webIP, 80), outcome{"reject-icmp", nil, false}},
		{"LoadBalancer IP: masqueraded", tcp(client, lbIP, 80), outcome{"accept", webEPs, true}},
		{"external IP", tcp(client, extIP, 80), outcome{"accept", webEPs, true}},
		{"node port on the node address", tcp(client, nodeIP, 30080), outcome{"accept", webEPs, true}},
		{"node port on the pod bridge address", tcp(pod1, nodeBridge, 30080), outcome{"accept", webEPs, true}},
		{"node port on an address that is not the node's: untouched", tcp(client, "198.18.1.9", 30080), outcome{"accept", nil, false}},
		{"range start-1: rejected", udp(client, rtpIP, 16383), outcome{"reject-icmp", nil, false}},
		{"range start: port kept", udp(client, rtpIP, 16384), outcome{"accept", []string{pod2}, true}},
		{"range middle", udp(pod1, rtpIP, 16400), outcome{"accept", []string{pod2}, false}},
		{"range end", udp(client, rtpIP, 16483), outcome{"accept", []string{pod2}, true}},
		{"range end+1: rejected", udp(client, rtpIP, 16484), outcome{"reject-icmp", nil, false}},
		{"range protocol mismatch: rejected", tcp(client, rtpIP, 16400), outcome{"reject-tcp-reset", nil, false}},
		{"all-ports ClusterIP, any port", tcp(pod2, anyIP, 2222), outcome{"accept", []string{pod1, pod3}, false}},
		{"all-ports LB IP, any port", tcp(client, "198.19.100.2", 65535), outcome{"accept", []string{pod1, pod3}, true}},
		{"all-ports other protocol: rejected", udp(client, anyIP, 53), outcome{"reject-icmp", nil, false}},
		{"all-ports node port allocated anyway: not programmed", tcp(client, nodeIP, 30999), outcome{"accept", nil, false}},
		{"all-ports never opens the node address", tcp(client, nodeIP, 22), outcome{"accept", nil, false}},
		{"no endpoints: ICMP", udp(client, "198.19.0.13", 53), outcome{"reject-icmp", nil, false}},
		{"no endpoints TCP: reset", tcp(pod1, "198.19.0.13", 53), outcome{"reject-tcp-reset", nil, false}},
		{"no endpoints node port: rejected at input", udp(client, nodeIP, 30053), outcome{"reject-icmp", nil, false}},
		{"no endpoints, from the node itself", local(udp(nodeIP, "198.19.0.13", 53)), outcome{"reject-icmp", nil, false}},
		{"unallocated Service address: dropped", tcp(client, "198.19.0.99", 80), outcome{"drop", nil, false}},
		{"unallocated, from the node: dropped", local(tcp(nodeIP, "198.19.0.99", 80)), outcome{"drop", nil, false}},
		{"address outside the service CIDR: untouched", tcp(client, "198.18.128.50", 80), outcome{"accept", nil, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := tr.run(c.p)
			if got.String() != c.want.String() {
				t.Errorf("trace %+v\n got %s\nwant %s", c.p, got, c.want)
			}
		})
	}
}

func TestHairpinIsMasqueraded(t *testing.T) {
	b := testBuilder(t, nil)
	svc := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "solo"}, Ports: []model.ServicePort{{
		Name: pn("default", "solo", "http", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080, ClusterIPs: addrs(webIP), Endpoints: ready(8080, pod1),
	}}}
	tr := newTracer(t, b.Ruleset(testNode(), []*model.Service{svc}), nodeIP)
	if got, want := tr.run(tcp(pod1, webIP, 80)).String(), (outcome{"accept", []string{"198.18.128.10:8080"}, true}).String(); got != want {
		t.Errorf("pod reaching itself: got %s, want %s", got, want)
	}
	if got, want := tr.run(tcp(pod2, webIP, 80)).String(), (outcome{"accept", []string{"198.18.128.10:8080"}, false}).String(); got != want {
		t.Errorf("another pod: got %s, want %s", got, want)
	}
}

func TestMasqueradeAllAndNoClusterCIDR(t *testing.T) {
	svc := services()[0]
	for _, c := range []struct {
		name string
		mut  func(*Config)
		from string
		want bool
	}{
		{"masquerade-all marks pod traffic", func(c *Config) { c.MasqueradeAll = true }, pod3, true},
		{"no cluster CIDR: ClusterIP traffic is not masqueraded", func(c *Config) { c.ClusterCIDRs = nil }, client, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracer(t, testBuilder(t, c.mut).Ruleset(testNode(), []*model.Service{svc}), nodeIP)
			if got := tr.run(tcp(c.from, webIP, 80)).masquerade; got != c.want {
				t.Errorf("masquerade = %v, want %v", got, c.want)
			}
		})
	}
}

func TestTerminatingFallbackAndIPv6(t *testing.T) {
	b := testBuilder(t, func(c *Config) {
		c.Family = nft.IPv6
		c.ClusterCIDRs = []netip.Prefix{netip.MustParsePrefix("fd00:128::/64")}
		c.ServiceCIDRs = []netip.Prefix{netip.MustParsePrefix("fd00:19::/112")}
	})
	svc := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "v6"}, Ports: []model.ServicePort{{
		Name: pn("default", "v6", "http", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080,
		ClusterIPs: addrs(webIP, "fd00:19::10"),
		Endpoints: []model.Endpoint{
			{Addr: netip.MustParseAddr("fd00:128::10"), Port: 8080, Serving: true, Terminating: true},
			{Addr: netip.MustParseAddr("fd00:128::11"), Port: 8080, Terminating: true},
			{Addr: netip.MustParseAddr(pod1), Port: 8080, Ready: true},
		},
	}}}
	rs := b.Ruleset(&model.Node{Addresses: addrs("fd00:1::1", nodeIP)}, []*model.Service{svc})
	if rs.Table.Family != nft.IPv6 {
		t.Fatalf("table family %v, want ip6", rs.Table.Family)
	}
	tr := newTracer(t, rs, "fd00:1::1")
	got := tr.run(tcp("fd00:128::20", "fd00:19::10", 80))
	want := outcome{"accept", []string{"[fd00:128::10]:8080"}, false}
	if got.String() != want.String() {
		t.Errorf("IPv6 with only a serving terminating endpoint: got %s, want %s", got, want)
	}
	for _, e := range rs.Elements[SetClusterIPs] {
		if e.Key[0].Addr.Is4() {
			t.Errorf("IPv4 ClusterIP %v leaked into the ip6 table", e.Key[0].Addr)
		}
	}
	if n := len(rs.Elements[SetNodePortIPs]); n != 1 {
		t.Errorf("ip6 node-port addresses: %d elements, want 1 (fd00:1::1)", n)
	}
}

func TestLoopbackNeverAcceptsNodePorts(t *testing.T) {
	rs := testBuilder(t, nil).Ruleset(testNode(), nil)
	for _, e := range rs.Elements[SetNodePortIPs] {
		if e.Key[0].Addr.IsLoopback() {
			t.Errorf("loopback %v accepts node ports", e.Key[0].Addr)
		}
	}
	rs = testBuilder(t, func(c *Config) { c.NodePortCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24")} }).Ruleset(testNode(), nil)
	if got := len(rs.Elements[SetNodePortIPs]); got != 1 || rs.Elements[SetNodePortIPs][0].Key[0].Addr.String() != nodeIP {
		t.Errorf("--nodeport-addresses 198.18.1.0/24: got %v, want only %s", rs.Elements[SetNodePortIPs], nodeIP)
	}
}

func TestRangeIsOneIntervalElement(t *testing.T) {
	rs := testBuilder(t, nil).Ruleset(testNode(), services())
	var n int
	for _, e := range rs.Elements[MapServiceRanges] {
		if strings.Contains(e.Comment, "voip/rtp") {
			n++
			if e.KeyEnd == nil || e.KeyEnd[2].Num != 16483 || e.Key[2].Num != 16384 {
				t.Errorf("range element %+v, want key port 16384 and end 16483", e)
			}
		}
	}
	if n != 1 {
		t.Errorf("range Service has %d elements in %s, want exactly 1", n, MapServiceRanges)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"same bit", func(c *Config) { c.DropMark = c.MasqueradeMark }, "different bits"},
		{"two bits", func(c *Config) { c.DropMark = 0x3 }, "exactly one bit"},
		{"no family", func(c *Config) { c.Family = 0 }, "family"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000}
			c.mut(&cfg)
			_, err := NewBuilder(cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	if _, err := BitMask(32); err == nil {
		t.Error("bit 32 accepted")
	}
	if m, _ := BitMask(14); m != 0x4000 {
		t.Errorf("BitMask(14) = %#x, want 0x4000", m)
	}
}

// TestServiceScratchEqualsService: ServiceScratch builds exactly Service's fragment while it
// reuses its memory from call to call, a Service too large for one slab included.
func TestServiceScratchEqualsService(t *testing.T) {
	var many []model.Endpoint
	for i := 0; i < 700; i++ { // ~8,000 slot values: more than one slab
		many = append(many, model.Endpoint{Addr: netip.AddrFrom4([4]byte{198, 18, 200 + byte(i/250), byte(i % 250)}), Port: 8080, Ready: true, Serving: true})
	}
	big := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "big"}, Ports: []model.ServicePort{{
		Name: pn("default", "big", "http", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080, NodePort: 30081,
		ClusterIPs: addrs("198.19.0.99"), LoadBalancerIPs: addrs("198.19.100.9"), Endpoints: many,
	}}}
	svcs := append(services(), big)
	svcs = append(svcs, svcs...) // each built twice, after others
	scratch, fresh := testBuilder(t, nil), testBuilder(t, nil)
	for _, s := range svcs {
		got, want := scratch.ServiceScratch(testNode(), s), fresh.Service(testNode(), s)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ServiceScratch(%v) differs from Service:\n got %+v\nwant %+v", s.Key, got, want)
		}
	}
}

// TestServiceScratchLeavesServiceAlone: a fragment from Service is the caller's to keep; a later
// ServiceScratch call reuses only ServiceScratch's own memory, never what Service handed out.
// And ServiceScratch does reuse it: a warm builder allocates less for it than for Service.
func TestServiceScratchLeavesServiceAlone(t *testing.T) {
	b, node, svcs := testBuilder(t, nil), testNode(), services()
	b.ServiceScratch(node, svcs[1])
	kept := b.Service(node, svcs[0])
	want := fmt.Sprintf("%+v", kept)
	for _, s := range svcs {
		b.ServiceScratch(node, s)
	}
	if got := fmt.Sprintf("%+v", kept); got != want {
		t.Errorf("Service's fragment changed under later ServiceScratch calls:\n got %s\nwant %s", got, want)
	}
	web := svcs[0]
	for i := range 50 { // each endpoint's slots are elements whose keys ServiceScratch cuts from its slab
		web.Ports[0].Endpoints = append(web.Ports[0].Endpoints, model.Endpoint{Addr: netip.AddrFrom4([4]byte{198, 18, 129, byte(i)}), Port: 8080, Ready: true, Serving: true})
	}
	scratch := allocatedBytes(func() { b.ServiceScratch(node, web) })
	fresh := allocatedBytes(func() { b.Service(node, web) })
	t.Logf("bytes a call: scratch %d fresh %d", scratch, fresh)
	if scratch > fresh/2 {
		t.Errorf("ServiceScratch allocates %d bytes a call, Service %d: want at most half (it reuses its memory)", scratch, fresh)
	}
}

// allocatedBytes is what one call of f allocates on the heap, averaged over 20 calls after a
// warm-up one (a byte count, not a time: it does not depend on how busy the machine is).
func allocatedBytes(f func()) uint64 {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 20 {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / 20
}
