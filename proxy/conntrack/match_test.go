package conntrack

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// flow builds a conntrack entry: client -> dst:dport in the original direction, replied by
// replySrc:replyPort.
func flow(proto uint8, dst netip.Addr, dport uint16, replySrc netip.Addr, replyPort uint16) *netlink.ConntrackFlow {
	client := netip.MustParseAddr("198.18.1.2")
	if dst.Is6() {
		client = netip.MustParseAddr("fd00:1::2")
	}
	f := &netlink.ConntrackFlow{}
	f.Forward = netlink.IPTuple{Protocol: proto, SrcIP: net.IP(client.AsSlice()), SrcPort: 40000,
		DstIP: net.IP(dst.AsSlice()), DstPort: dport}
	f.Reverse = netlink.IPTuple{Protocol: proto, SrcIP: net.IP(replySrc.AsSlice()), SrcPort: replyPort,
		DstIP: net.IP(client.AsSlice()), DstPort: 40000}
	return f
}

func TestMatcher(t *testing.T) {
	dnsTarget := Target{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP, 53, 53)}, Keep: keepOf(pod1, 5353)}
	rtpTarget := Target{Port: udpName("rtp"), Frontends: []Frontend{fe(clusterIP, 16384, 16483), fe(netip.Addr{}, 40100, 40199)},
		Keep: keepOf(pod2, 0)}
	gone := Target{Port: udpName("old"), Frontends: []Frontend{fe(lbIP, 53, 53)}}
	// A frontend handed from one port to another: the gone one keeps nothing, the new one pod3.
	handedOver := []Target{{Port: udpName("a"), Frontends: []Frontend{fe(extIP, 53, 53)}},
		{Port: udpName("b"), Frontends: []Frontend{fe(extIP, 53, 53)}, Keep: keepOf(pod3, 5353)}}
	dual := Target{Port: udpName("dns"), Frontends: []Frontend{fe(clusterIP6, 53, 53), fe(clusterIP, 53, 53)},
		Keep: keepOf(pod1v6, 5353)}

	tests := []struct {
		name    string
		targets []Target
		flow    *netlink.ConntrackFlow
		want    bool
	}{
		{"to a removed endpoint", []Target{dnsTarget}, flow(unix.IPPROTO_UDP, clusterIP, 53, pod2, 5353), true},
		{"to a serving endpoint", []Target{dnsTarget}, flow(unix.IPPROTO_UDP, clusterIP, 53, pod1, 5353), false},
		{"serving pod, old target port", []Target{dnsTarget}, flow(unix.IPPROTO_UDP, clusterIP, 53, pod1, 5354), true},
		{"never DNAT'ed (reply from the ClusterIP itself)", []Target{dnsTarget}, flow(unix.IPPROTO_UDP, clusterIP, 53, clusterIP, 53), true},
		{"tcp is left alone", []Target{dnsTarget}, flow(unix.IPPROTO_TCP, clusterIP, 53, pod2, 5353), false},
		{"sctp is left alone", []Target{dnsTarget}, flow(unix.IPPROTO_SCTP, clusterIP, 53, pod2, 5353), false},
		{"other port of the ClusterIP", []Target{dnsTarget}, flow(unix.IPPROTO_UDP, clusterIP, 54, pod2, 5353), false},
		{"other address", []Target{dnsTarget}, flow(unix.IPPROTO_UDP, lbIP, 53, pod2, 5353), false},
		{"range start", []Target{rtpTarget}, flow(unix.IPPROTO_UDP, clusterIP, 16384, pod1, 16384), true},
		{"range end", []Target{rtpTarget}, flow(unix.IPPROTO_UDP, clusterIP, 16483, pod1, 16483), true},
		{"below the range", []Target{rtpTarget}, flow(unix.IPPROTO_UDP, clusterIP, 16383, pod1, 16383), false},
		{"above the range", []Target{rtpTarget}, flow(unix.IPPROTO_UDP, clusterIP, 16484, pod1, 16484), false},
		{"range, kept pod on any port", []Target{rtpTarget}, flow(unix.IPPROTO_UDP, clusterIP, 16400, pod2, 16400), false},
		{"node-port block on any address", []Target{rtpTarget}, flow(unix.IPPROTO_UDP, nodeIP, 40150, pod1, 16434), true},
		{"node-port block, kept pod", []Target{rtpTarget}, flow(unix.IPPROTO_UDP, nodeIP, 40150, pod2, 16434), false},
		{"node-port block on IPv6", []Target{rtpTarget}, flow(unix.IPPROTO_UDP, nodeIP6, 40199, pod1v6, 16483), true},
		{"gone frontend: everything goes", []Target{gone}, flow(unix.IPPROTO_UDP, lbIP, 53, pod1, 5353), true},
		{"handed over: the new owner's endpoint stays", handedOver, flow(unix.IPPROTO_UDP, extIP, 53, pod3, 5353), false},
		{"handed over: the old owner's endpoint goes", handedOver, flow(unix.IPPROTO_UDP, extIP, 53, pod1, 5353), true},
		{"IPv6 stale", []Target{dual}, flow(unix.IPPROTO_UDP, clusterIP6, 53, netip.MustParseAddr("fd00:128::12"), 5353), true},
		{"IPv6 kept", []Target{dual}, flow(unix.IPPROTO_UDP, clusterIP6, 53, pod1v6, 5353), false},
		{"IPv4 of a target keeping only IPv6", []Target{dual}, flow(unix.IPPROTO_UDP, clusterIP, 53, pod1, 5353), true},
		{"no targets", nil, flow(unix.IPPROTO_UDP, clusterIP, 53, pod2, 5353), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMatcher(tc.targets, netip.MustParseAddr(tc.flow.Forward.DstIP.String()).Is6())
			if got := m.MatchConntrackFlow(tc.flow); got != tc.want {
				t.Errorf("delete %s? got %v, want %v", tc.flow, got, tc.want)
			}
		})
	}
}

func TestMatcherFamilies(t *testing.T) {
	tests := []struct {
		name         string
		targets      []Target
		want4, want6 bool // the family has work
	}{
		{"none", nil, false, false},
		{"IPv4 only", []Target{{Frontends: []Frontend{fe(clusterIP, 53, 53)}}}, true, false},
		{"IPv6 only", []Target{{Frontends: []Frontend{fe(clusterIP6, 53, 53)}}}, false, true},
		{"node port on any address: both", []Target{{Frontends: []Frontend{fe(netip.Addr{}, 30000, 30000)}}}, true, true},
		{"target without frontends", []Target{{Keep: keepOf(pod1, 1)}}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got4, got6 := !newMatcher(tc.targets, false).empty(), !newMatcher(tc.targets, true).empty()
			if got4 != tc.want4 || got6 != tc.want6 {
				t.Errorf("work for IPv4, IPv6: got %v, %v; want %v, %v", got4, got6, tc.want4, tc.want6)
			}
		})
	}
}

// TestMemory: each sync's committed Services are paired with what the last sync committed of
// them. (A failed sync's Services wait in the proxier and come with the next successful sync's:
// proxier's TestHooksSeeChangesOfFailedSyncs.)
func TestMemory(t *testing.T) {
	v1 := svc(dns(ep(pod1, 5353), ep(pod2, 5353)))
	v2 := svc(dns(ep(pod2, 5353)))
	v3 := svc(dns(ep(pod3, 5353)))
	tcpOnly := &model.Service{Key: model.ServiceKey{Namespace: "ns", Name: "web"},
		Ports: []model.ServicePort{{Name: model.PortName{Protocol: model.TCP}, Port: 80}}}
	m := newMemory()
	step := func(name string, committed map[model.ServiceKey]*model.Service, want []Change) {
		t.Helper()
		got := m.changes(committed)
		if len(got) != len(want) {
			t.Fatalf("%s: got %d changes %+v, want %d %+v", name, len(got), got, len(want), want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: change %d: got %+v, want %+v", name, i, got[i], want[i])
			}
		}
	}
	step("first sync: new", map[model.ServiceKey]*model.Service{svcKey: v1, tcpOnly.Key: tcpOnly}, []Change{{New: v1}})
	step("nothing committed", nil, nil)
	step("update", map[model.ServiceKey]*model.Service{svcKey: v2}, []Change{{Old: v1, New: v2}})
	step("next update pairs with the committed model", map[model.ServiceKey]*model.Service{svcKey: v3}, []Change{{Old: v2, New: v3}})
	step("same pointer again: no change", map[model.ServiceKey]*model.Service{svcKey: v3}, nil)
	step("delete", map[model.ServiceKey]*model.Service{svcKey: nil, tcpOnly.Key: nil}, []Change{{Old: v3}})
	step("gone stays gone", map[model.ServiceKey]*model.Service{svcKey: nil}, nil)
}
