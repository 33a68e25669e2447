package conntrack_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/conntrack"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/lab"
)

// services is a hand-written stand-in for nftproxy's ruleset in the lab's node: every frontend is
// DNAT'ed to one pod, %[1]s / %[2]s (IPv4 / IPv6), so that the test decides which pod each new
// flow reaches. dns and control are ClusterIP port 53 -> 5353 (both TCP and UDP), rtp a UDP
// range 16384-16393 kept port, any an all-ports LoadBalancer IP, and 30053 a node port of dns.
const services = `
table ip cttest {
	chain services {
		ip daddr 198.19.0.1 meta l4proto { tcp, udp } th dport 53 dnat to %[1]s:5353
		ip daddr 198.19.0.3 meta l4proto { tcp, udp } th dport 53 dnat to %[1]s:5353
		ip daddr 198.19.0.2 udp dport 16384-16393 dnat to %[1]s
		ip daddr 198.19.100.1 meta l4proto udp dnat to %[1]s
		ip daddr 198.18.0.1 udp dport 30053 dnat to %[1]s:5353
	}
	chain prerouting { type nat hook prerouting priority dstnat; jump services; }
}
table ip6 cttest {
	chain services {
		ip6 daddr fd00:19::1 meta l4proto { tcp, udp } th dport 53 dnat to [%[2]s]:5353
	}
	chain prerouting { type nat hook prerouting priority dstnat; jump services; }
}
`

func point(t *testing.T, l *lab.Lab, pod int) {
	t.Helper()
	script := fmt.Sprintf(services, lab.PodIPv4(pod), lab.PodIPv6(pod))
	if _, err := l.Nft("list", "table", "ip", "cttest"); err == nil {
		script = "delete table ip cttest\ndelete table ip6 cttest\n" + script
	}
	if err := l.NftApply(script); err != nil {
		t.Fatal(err)
	}
}

func ep(a netip.Addr, port uint16) model.Endpoint {
	return model.Endpoint{Addr: a, Port: port, Ready: true, Serving: true}
}

// model returns the dns, control, rtp and any Services with the given pods as endpoints.
func models(pods ...int) []*model.Service {
	name := func(svc, port string) model.PortName {
		return model.PortName{Service: model.ServiceKey{Namespace: "ct", Name: svc}, Port: port, Protocol: model.UDP}
	}
	var dnsEps, keptEps []model.Endpoint
	for _, p := range pods {
		dnsEps = append(dnsEps, ep(lab.PodIPv4(p), 5353), ep(lab.PodIPv6(p), 5353))
		keptEps = append(keptEps, ep(lab.PodIPv4(p), 0))
	}
	svc := func(sp model.ServicePort) *model.Service {
		return &model.Service{Key: sp.Name.Service, Ports: []model.ServicePort{sp}}
	}
	return []*model.Service{
		svc(model.ServicePort{Name: name("dns", "dns"), Port: 53, PortEnd: 53, TargetPort: 5353, NodePort: 30053, NodePortEnd: 30053,
			ClusterIPs: []netip.Addr{lab.ClusterIPv4(1), lab.ClusterIPv6(1)}, Endpoints: dnsEps}),
		svc(model.ServicePort{Name: name("rtp", "rtp"), Port: 16384, PortEnd: 16393,
			ClusterIPs: []netip.Addr{lab.ClusterIPv4(2)}, Endpoints: keptEps}),
		svc(model.ServicePort{Name: name("any", model.AllPortsName), AllPorts: true,
			ClusterIPs: []netip.Addr{lab.ClusterIPv4(4)}, LoadBalancerIPs: []netip.Addr{lab.LoadBalancerIPv4(1)}, Endpoints: keptEps}),
	}
}

type probe struct {
	name    string
	network string
	addr    netip.AddrPort
	stale   bool // created towards pod-1, whose endpoints the sync removes
}

// TestCleanupKernel creates real flows through the lab's node, removes pod-1 from the model,
// and proves with conntrack -L, the cleaner's count and packets on the same 5-tuples that
// exactly the stale UDP flows went: they now reach pod-2, while flows to pod-2, to a Service
// that did not change and over TCP keep their entries.
func TestCleanupKernel(t *testing.T) {
	l := lab.New(t, lab.Options{Prefix: "nftp-ct", Pods: 2, Ports: []lab.PortSpec{lab.Port(5353), lab.PortRange(16384, 16393)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	old := []probe{
		{"dns v4", "udp", netip.AddrPortFrom(lab.ClusterIPv4(1), 53), true},
		{"dns v6", "udp", netip.AddrPortFrom(lab.ClusterIPv6(1), 53), true},
		{"range start", "udp", netip.AddrPortFrom(lab.ClusterIPv4(2), 16384), true},
		{"range end", "udp", netip.AddrPortFrom(lab.ClusterIPv4(2), 16393), true},
		{"all-ports", "udp", netip.AddrPortFrom(lab.LoadBalancerIPv4(1), 5353), true},
		{"node port", "udp", netip.AddrPortFrom(netip.MustParseAddr(lab.NodeIPv4), 30053), true},
		{"unchanged service", "udp", netip.AddrPortFrom(lab.ClusterIPv4(3), 53), false},
		{"tcp to the changed service", "tcp", netip.AddrPortFrom(lab.ClusterIPv4(1), 53), false},
	}
	live := []probe{
		{"dns v4 to pod-2", "udp", netip.AddrPortFrom(lab.ClusterIPv4(1), 53), false},
		{"range to pod-2", "udp", netip.AddrPortFrom(lab.ClusterIPv4(2), 16390), false},
		{"node port to pod-2", "udp", netip.AddrPortFrom(netip.MustParseAddr(lab.NodeIPv4), 30053), false},
	}
	open := func(ps []probe, want string) []*lab.Flow {
		var fs []*lab.Flow
		for _, p := range ps {
			f := lab.NewFlow(l.Client(1).NS, p.network, p.addr.String())
			t.Cleanup(f.Close)
			if r := f.Probe(ctx); r.Outcome != lab.Replied || r.Reply.Pod != want {
				t.Fatalf("%s: first probe got %v, want a reply from %s", p.name, r, want)
			}
			fs = append(fs, f)
		}
		return fs
	}
	point(t, l, 1)
	oldFlows := open(old, "pod-1")
	point(t, l, 2) // every rule now goes to pod-2: only deleting an entry moves a flow
	liveFlows := open(live, "pod-2")

	c, err := conntrack.New(logr.Discard(), conntrack.WithNetNSFd(l.Node.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before, after := models(1, 2), models(2)
	var changes []conntrack.Change
	for i := range before {
		changes = append(changes, conntrack.Change{Old: before[i], New: after[i]})
	}
	res, err := c.Cleanup(ctx, conntrack.Targets(l.NodeIPs(), changes))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res, (conntrack.Result{IPv4: 5, IPv6: 1}); got != want {
		t.Errorf("deleted: got %+v, want %+v", got, want)
	}

	all := append(append([]probe{}, old...), live...)
	flows := append(append([]*lab.Flow{}, oldFlows...), liveFlows...)
	for i, p := range all {
		src := flows[i].Local()
		out, err := l.Conntrack("-p", p.network, "--orig-src", src.Addr().String(), "--orig-port-src", fmt.Sprint(src.Port()))
		if err != nil && !strings.Contains(err.Error(), "0 flow entries") {
			t.Fatalf("%s: %v", p.name, err)
		}
		if gone := strings.TrimSpace(out) == ""; gone != p.stale {
			t.Errorf("%s (%s from %s): entry gone = %v, want %v; conntrack -L:\n%s", p.name, p.addr, src, gone, p.stale, out)
		}
	}

	for i, p := range all {
		want := "pod-2"
		if !p.stale && i < len(old) {
			want = "pod-1" // its entry stayed, so the same 5-tuple still reaches the old pod
		}
		if r := flows[i].Probe(ctx); r.Outcome != lab.Replied || r.Reply.Pod != want {
			t.Errorf("%s after cleanup: same 5-tuple got %v, want a reply from %s", p.name, r, want)
		}
	}

	// Nothing changed since: a second cleanup with the same targets finds nothing stale.
	if res, err := c.Cleanup(ctx, conntrack.Targets(l.NodeIPs(), changes)); err != nil || res.Total() != 0 {
		t.Errorf("second cleanup: got %+v, %v; want nothing deleted", res, err)
	}
}
