package ruleset

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/model"
)

func TestTopologySameZone(t *testing.T) {
	zoned := policyServices()[4]
	zIP := "198.19.0.21"
	for _, c := range []struct {
		name string
		node *model.Node
		want []string
	}{
		{"PreferClose on a node of zone z1: its zone's endpoints", zonedNode("z1"), []string{"198.18.128.10:8080", "198.18.128.12:8080"}},
		{"zone z2", zonedNode("z2"), ep2},
		{"a zone without endpoints: all", zonedNode("z9"), ep123},
		{"a node without zone label: all", testNode(), ep123},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracer(t, policyBuilder(t).Ruleset(c.node, []*model.Service{zoned}), nodeIP)
			// From a pod that is no endpoint: no branch is a hairpin.
			if got := tr.run(tcp("198.18.128.20", zIP, 80)); !slices.Equal(got.dnat, c.want) {
				t.Errorf("got %v, want %v", got.dnat, c.want)
			}
		})
	}
	hinted := webPort(func(sp *model.ServicePort) {
		sp.Endpoints = []model.Endpoint{
			model.Endpoint{Addr: netip.MustParseAddr(pod1), Port: 8080, Ready: true, Serving: true}.At("", "", "z2"),
			model.Endpoint{Addr: netip.MustParseAddr(pod2), Port: 8080, Ready: true, Serving: true}.At("", "", "z1"),
		}
	})
	tr := newTracer(t, policyBuilder(t).Ruleset(zonedNode("z1"), []*model.Service{hinted}), nodeIP)
	if got := tr.run(tcp(pod3, webIP, 80)); !slices.Equal(got.dnat, ep2) {
		t.Errorf("EndpointSlice hints for z1: got %v, want %v (hints win over the endpoints' own zones)", got.dnat, ep2)
	}
	if got := tr.run(tcp(client, nodeIP, 30080)); !slices.Equal(got.dnat, ep2) {
		t.Errorf("node port traffic under Cluster policy follows topology too: got %v, want %v", got.dnat, ep2)
	}
}

func TestLoadBalancerSourceRanges(t *testing.T) {
	svcs := policyServices()
	tr := newTracer(t, policyBuilder(t).Ruleset(testNode(), svcs), nodeIP, nodeBridge)
	anyLB, rtpLB := "198.19.100.2", "198.19.100.3"
	runTraces(t, tr, []traceCase{
		{"port: source in range", tcp(client, lbIP, 80), outcome{"accept", ep1, false}},
		{"port: source outside the ranges dropped", tcp(outsider, lbIP, 80), dropped},
		{"port: pods are subject to the ranges too", tcp(pod3, lbIP, 80), dropped},
		{"port: node port not filtered", tcp(outsider, nodeIP, 30080), outcome{"accept", ep1, false}},
		{"port: external IP not filtered", tcp(outsider, extIP, 80), outcome{"accept", ep1, false}},
		{"port: ClusterIP not filtered", tcp(outsider, webIP, 80), outcome{"accept", ep12, true}},
		{"range start: source in range", udp(client, rtpLB, 16384), outcome{"accept", []string{pod1, pod2}, true}},
		{"range start: outside dropped", udp(outsider, rtpLB, 16384), dropped},
		{"range end: outside dropped", udp(outsider, rtpLB, 16483), dropped},
		{"all-ports: source in range", tcp(client, anyLB, 2222), outcome{"accept", []string{pod1, pod3}, true}},
		{"all-ports: outside dropped on any port", tcp(outsider, anyLB, 2222), dropped},
		{"all-ports: ClusterIP not filtered", tcp(outsider, anyIP, 2222), outcome{"accept", []string{pod1, pod3}, true}},
	})

	// The node (198.18.1.1, inside 198.18.1.0/28) holds the VIP locally and reaches it from it.
	tr = newTracer(t, policyBuilder(t).Ruleset(testNode(), svcs), nodeIP, nodeBridge, lbIP)
	if got, want := tr.run(local(tcp(lbIP, lbIP, 80))), (outcome{"accept", ep12, true}); got.String() != want.String() {
		t.Errorf("node in range, source the VIP: got %s, want %s", got, want)
	}

	// A node outside the ranges gets no VIP exception.
	far := &model.Node{Name: thisNode, Addresses: addrs("198.18.3.1")}
	tr = newTracer(t, policyBuilder(t).Ruleset(far, svcs), "198.18.3.1", lbIP)
	if got := tr.run(local(tcp(lbIP, lbIP, 80))); got.String() != dropped.String() {
		t.Errorf("node outside the ranges, source the VIP: got %s, want %s", got, dropped)
	}
}

func TestMergePrefixes(t *testing.T) {
	for _, c := range []struct {
		in   []string
		want string
	}{
		{[]string{"198.18.1.0/28", "198.18.1.8/29"}, "[198.18.1.0-198.18.1.15]"},
		{[]string{"198.18.1.16/28", "198.18.1.0/28"}, "[198.18.1.0-198.18.1.31]"},
		{[]string{"198.18.1.0/28", "198.18.1.64/28"}, "[198.18.1.0-198.18.1.15 198.18.1.64-198.18.1.79]"},
		{[]string{"198.18.1.5/32", "0.0.0.0/0"}, "[0.0.0.0-255.255.255.255]"},
		{[]string{"255.255.255.255/32", "255.255.255.0/24"}, "[255.255.255.0-255.255.255.255]"},
		{[]string{"fd00::/127", "fd00::2/128"}, "[fd00::-fd00::2]"},
		{[]string{"198.18.1.5/24"}, "[198.18.1.0-198.18.1.255]"}, // host bits set: the whole prefix
	} {
		var ps []netip.Prefix
		for _, s := range c.in {
			ps = append(ps, netip.MustParsePrefix(s))
		}
		var got []string
		for _, r := range mergePrefixes(ps) {
			got = append(got, r[0].String()+"-"+r[1].String())
		}
		if g := "[" + joinSpace(got) + "]"; g != c.want {
			t.Errorf("mergePrefixes(%v) = %s, want %s", c.in, g, c.want)
		}
	}
}

func joinSpace(ss []string) string {
	out := ""
	for i, s := range ss {
		if i > 0 {
			out += " "
		}
		out += s
	}
	return out
}
