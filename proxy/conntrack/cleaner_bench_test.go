package conntrack_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/proxy/conntrack"
	"github.com/nftproxy/nftproxy/proxy/model"
	netnstest "github.com/nftproxy/nftproxy/test/netns"
)

// BenchmarkCleanup measures one cleanup of 1,000 ClusterIPs, each of which lost one of its two
// endpoints, over a conntrack table (in a private namespace) holding 10,000 live UDP entries to
// them, plus 0 or 10,000 stale ones (re-created before each iteration): the cost of the dump and
// match alone, and with one netlink delete per stale entry.
func BenchmarkCleanup(b *testing.B) {
	ns := netnstest.New(b, "nftp-ctbench")
	h, err := netlink.NewHandleAt(netns.NsHandle(ns.Fd()), unix.NETLINK_NETFILTER)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	const services = 1000
	client := netip.MustParseAddr("198.18.1.2")
	var changes []conntrack.Change
	var stale, live []*netlink.ConntrackFlow
	for i := range services {
		vip := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
		pa := netip.AddrFrom4([4]byte{198, 18, 128 + byte(i>>8), byte(i)})
		pb := netip.AddrFrom4([4]byte{198, 18, 160 + byte(i>>8), byte(i)})
		sp := func(eps ...netip.Addr) *model.Service {
			s := &model.Service{Key: model.ServiceKey{Namespace: "b", Name: fmt.Sprint(i)}}
			p := model.ServicePort{Name: model.PortName{Service: s.Key, Protocol: model.UDP}, Port: 53, PortEnd: 53, TargetPort: 5353,
				ClusterIPs: []netip.Addr{vip}}
			for _, e := range eps {
				p.Endpoints = append(p.Endpoints, model.Endpoint{Addr: e, Port: 5353, Ready: true, Serving: true})
			}
			s.Ports = []model.ServicePort{p}
			return s
		}
		changes = append(changes, conntrack.Change{Old: sp(pa, pb), New: sp(pb)})
		for j := range 10 {
			stale = append(stale, udpFlow(client, uint16(10000+i*10+j), vip, pa))
			live = append(live, udpFlow(client, uint16(10000+i*10+j), vip, pb))
		}
	}
	for i, f := range live { // a second client, so that live and stale tuples differ
		f.Forward.SrcIP = net.IP(netip.MustParseAddr("198.18.2.2").AsSlice())
		f.Reverse.DstIP = f.Forward.SrcIP
		live[i] = f
	}
	create := func(fs []*netlink.ConntrackFlow) {
		for _, f := range fs {
			if err := h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
				b.Fatalf("create %s: %v", f, err)
			}
		}
	}
	create(live)
	c, err := conntrack.New(logr.Discard(), conntrack.WithNetNSFd(ns.Fd()))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	targets := conntrack.Targets(nil, changes)
	ctx := context.Background()
	for _, n := range []int{0, len(stale)} {
		b.Run(fmt.Sprintf("stale=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				create(stale[:n])
				b.StartTimer()
				res, err := c.Cleanup(ctx, targets)
				if err != nil || res.IPv4 != n {
					b.Fatalf("cleanup: got %+v, %v; want %d deleted", res, err, n)
				}
			}
			b.ReportMetric(float64(len(live)+n), "entries")
		})
	}
}

func udpFlow(client netip.Addr, sport uint16, vip, pod netip.Addr) *netlink.ConntrackFlow {
	return &netlink.ConntrackFlow{
		FamilyType: unix.AF_INET,
		Forward: netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: net.IP(client.AsSlice()), SrcPort: sport,
			DstIP: net.IP(vip.AsSlice()), DstPort: 53},
		Reverse: netlink.IPTuple{Protocol: unix.IPPROTO_UDP, SrcIP: net.IP(pod.AsSlice()), SrcPort: 5353,
			DstIP: net.IP(client.AsSlice()), DstPort: sport},
		TimeOut: 120,
	}
}
