package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

// frozenProxy is a table playing kube-proxy's rules left in the kernel when it stopped
// (deploy/MIGRATION.md, steps 4 to 5): NAT chains at nft's dstnat priority, written before
// nftproxy starts (so registered first), translating each given Service address, TCP and UDP
// port 80, to target: what kube-proxy knew when it stopped.
func frozenProxy(target netip.Addr, services ...netip.Addr) string {
	fam, to := "ip", target.String()+":8080"
	if target.Is6() {
		fam, to = "ip6", "["+target.String()+"]:8080"
	}
	s := fmt.Sprintf("table %s kube-proxy {\n", fam)
	s += "\tchain nat-prerouting { type nat hook prerouting priority -100; policy accept; jump services; }\n"
	s += "\tchain nat-output { type nat hook output priority -100; policy accept; jump services; }\n"
	s += "\tchain services {\n"
	for _, a := range services {
		for _, p := range []string{"tcp", "udp"} {
			s += fmt.Sprintf("\t\t%s daddr %s %s dport 80 dnat to %s\n", fam, a, p, to)
		}
	}
	return s + "\t}\n}\n"
}

// onlyPods probes addr n times from ns and requires every probe answered by pods in want only.
func (e *env) onlyPods(t *testing.T, from string, ns *netns.NS, network, addr string, n int, want []string) {
	t.Helper()
	got := lab.Spread(e.ctx, ns, network, addr, n)
	if got.Outcomes[lab.Replied] != n {
		t.Errorf("%s: %s %s x%d: got %v (errors %v), want %d replies from %v", from, network, addr, n, got, got.Errors, n, want)
	}
	for pod, c := range got.Pods {
		if !slices.Contains(want, pod) {
			t.Errorf("%s: %s %s x%d: %s answered %d times, want only %v", from, network, addr, n, pod, c, want)
		}
	}
}

// TestFrozenProxyOverlap is the migration's overlap (deploy/MIGRATION.md, steps 2 to 5):
// another proxy's rules, frozen, still translate two Services to pod-3, which the API no longer
// lists for either. "changed" now has pods 1 and 2; "scaled" has no endpoint. With nftproxy's
// rules next to them, from an outside client (forwarded), a pod and the node itself (output):
// "changed" reaches only pods 1 and 2 (nftproxy's DNAT runs first, whichever table registered
// its hooks last), "scaled" is refused at once (its reject runs before every NAT chain), and a
// Service only the other proxy has, in nftproxy's service CIDR, stays the other proxy's (not
// dropped as an unallocated address).
func TestFrozenProxyOverlap(t *testing.T) {
	t.Parallel()
	changed := fixture.Service{
		Name:       "changed",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(40), lab.ClusterIPv6(40)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}, {Name: "dns", Protocol: "UDP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1, 2),
	}
	scaled := fixture.Service{
		Name:       "scaled",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(41), lab.ClusterIPv6(41)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}, {Name: "dns", Protocol: "UDP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(),
	}
	e := newEnv(t, lab.Options{Pods: 4, Ports: []lab.PortSpec{lab.Port(8080)}}, changed, scaled)
	// theirs (ClusterIP 42) is a Service only the other proxy has: nftproxy must leave it to it.
	writeFrozen := func() {
		t.Helper()
		for _, fam := range []struct{ target, changed, scaled, theirs netip.Addr }{
			{lab.PodIPv4(3), lab.ClusterIPv4(40), lab.ClusterIPv4(41), lab.ClusterIPv4(42)},
			{lab.PodIPv6(3), lab.ClusterIPv6(40), lab.ClusterIPv6(41), lab.ClusterIPv6(42)},
		} {
			if err := e.lab.NftApply(frozenProxy(fam.target, fam.changed, fam.scaled, fam.theirs)); err != nil {
				t.Fatalf("the frozen proxy's table: %v", err)
			}
		}
	}
	theirs := []netip.Addr{lab.ClusterIPv4(42), lab.ClusterIPv6(42)}
	writeFrozen()
	type source struct {
		name string
		ns   *netns.NS
	}
	sources := []source{{"client-1", e.lab.Client(1).NS}, {"pod-4", e.lab.Pod(4).NS}, {"the node", e.lab.Node}}
	const n = 20
	// The frozen rules alone: both Services go to pod-3 (else this test proves nothing).
	for _, src := range sources {
		for _, ip := range []netip.Addr{lab.ClusterIPv4(40), lab.ClusterIPv6(41)} {
			e.onlyPods(t, src.name+", frozen rules alone", src.ns, "tcp", hostPort(ip, 80), 3, podNames(3))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	e.start(changed, scaled)
	// The other proxy's own Service, in nftproxy's service CIDR, is translated by it, not
	// dropped as an unallocated address (nftproxy's tables registered last here).
	for _, ip := range theirs {
		e.onlyPods(t, "client-1, nftproxy registered last", e.lab.Client(1).NS, "tcp", hostPort(ip, 80), 3, podNames(3))
	}
	// Written again after nftproxy's tables: hooks of equal priority run in an order that
	// depends on when each was registered (a restarted kube-proxy re-creates its table).
	for _, fam := range []string{"ip", "ip6"} {
		if _, err := e.lab.Nft("delete", "table", fam, "kube-proxy"); err != nil {
			t.Fatal(err)
		}
	}
	writeFrozen()
	frozen := func() string {
		var out string
		for _, fam := range []string{"ip", "ip6"} {
			l, err := e.lab.Nft("list", "table", fam, "kube-proxy")
			if err != nil {
				t.Fatalf("the frozen table %s kube-proxy: %v", fam, err)
			}
			out += l
		}
		return out
	}
	before := frozen()
	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			for _, network := range []string{"tcp", "udp"} {
				for _, ip := range []netip.Addr{lab.ClusterIPv4(40), lab.ClusterIPv6(40)} {
					e.onlyPods(t, src.name, src.ns, network, hostPort(ip, 80), n, podNames(1, 2))
				}
				for _, ip := range theirs {
					e.onlyPods(t, src.name+", the other proxy's Service", src.ns, network, hostPort(ip, 80), 3, podNames(3))
				}
				for _, ip := range []netip.Addr{lab.ClusterIPv4(41), lab.ClusterIPv6(41)} {
					for i := 0; i < 5; i++ {
						if r := lab.Dial(e.ctx, src.ns, network, hostPort(ip, 80)); r.Outcome != lab.Refused {
							t.Errorf("%s: %s %s without endpoints, frozen DNAT to pod-3: got %v, want %v", src.name, network, hostPort(ip, 80), r, lab.Refused)
							break
						}
					}
				}
			}
		})
	}
	// nftproxy left the frozen tables alone.
	if after := frozen(); after != before {
		t.Errorf("the frozen tables changed:\n got %s\nwant %s", after, before)
	}
}
