package ruleset

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/netns"
)

// policyServices is one Service of each policy shape: eTP Local with affinity and source
// ranges, iTP Local without a local endpoint, a range and an all-ports LoadBalancer with
// source ranges, and a topology-aware ClusterIP.
func policyServices() []*model.Service {
	ranges := []netip.Prefix{netip.MustParsePrefix("198.18.1.0/28"), netip.MustParsePrefix("198.18.1.8/29")}
	web := webPort(func(sp *model.ServicePort) {
		sp.ExternalTrafficLocal, sp.AffinityTimeout, sp.LoadBalancerSourceRanges = true, 3*time.Second, ranges
	})
	itp := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "itp"}, Ports: []model.ServicePort{{
		Name: pn("default", "itp", "http", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080, ClusterIPs: addrs("198.19.0.20"),
		InternalTrafficLocal: true, Endpoints: on(otherNode, pod2),
	}}}
	rtp := &model.Service{Key: model.ServiceKey{Namespace: "voip", Name: "rtp"}, Ports: []model.ServicePort{{
		Name: pn("voip", "rtp", "rtp", model.UDP), Port: 16384, PortEnd: 16483, ClusterIPs: addrs(rtpIP),
		LoadBalancerIPs: addrs("198.19.100.3"), LoadBalancerSourceRanges: ranges, AffinityTimeout: time.Minute, Endpoints: ready(0, pod1, pod2),
	}}}
	anyp := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "any"}, Ports: []model.ServicePort{{
		Name: pn("default", "any", "", model.TCP), AllPorts: true, ClusterIPs: addrs(anyIP), LoadBalancerIPs: addrs("198.19.100.2"),
		LoadBalancerSourceRanges: ranges, Endpoints: ready(0, pod1, pod3),
	}}}
	zoned := &model.Service{Key: model.ServiceKey{Namespace: "default", Name: "zoned"}, Ports: []model.ServicePort{{
		Name: pn("default", "zoned", "http", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080, ClusterIPs: addrs("198.19.0.21"), PreferClose: true,
		Endpoints: []model.Endpoint{
			model.Endpoint{Addr: netip.MustParseAddr(pod1), Port: 8080, Ready: true, Serving: true}.At("", "z1"),
			model.Endpoint{Addr: netip.MustParseAddr(pod2), Port: 8080, Ready: true, Serving: true}.At("", "z2"),
			model.Endpoint{Addr: netip.MustParseAddr(pod3), Port: 8080, Ready: true, Serving: true}.At("", "z1"),
		},
	}}}
	return []*model.Service{web, itp, rtp, anyp, zoned}
}

// addAll is a transaction creating rs from nothing.
func addAll(rs *nft.Ruleset) *nft.Transaction {
	tx := nft.NewTransaction(rs.Table)
	tx.Add(&nft.TableObj{})
	for i := range rs.Chains {
		tx.Add(&rs.Chains[i])
	}
	for i := range rs.Sets {
		tx.Add(&rs.Sets[i])
	}
	for _, els := range rs.Elements {
		for i := range els {
			tx.Add(&els[i])
		}
	}
	for i := range rs.Rules {
		tx.Add(&rs.Rules[i])
	}
	return tx
}

// TestKernelPolicyRuleset proves that the policy layout, own chains and shared endpoint maps
// alike, is what the kernel and nft accept: it applies it over netlink, the kernel lists back
// what was applied (a restart finds nothing to do), and `nft -f` of the kernel's listing in a
// second namespace lists the same text (every rule is valid nft syntax and means the same).
func TestKernelPolicyRuleset(t *testing.T) {
	netns.Skip(t)
	rs := policyBuilder(t).Ruleset(zonedNode("z1"), append(policyServices(), cluster(30)...))
	for _, name := range []string{"fake", "kernel"} {
		t.Run(name, func(t *testing.T) {
			var k nft.Interface = nft.NewFake()
			var ns *netns.NS
			if name == "kernel" {
				ns = netns.New(t, "rulesetpol")
				kk, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
				if err != nil {
					t.Fatalf("NewKernel: %v", err)
				}
				t.Cleanup(func() { kk.Close() })
				k = kk
			}
			if _, err := k.Apply(context.Background(), addAll(rs)); err != nil {
				t.Fatalf("apply the policy ruleset: %v", err)
			}
			if ns == nil {
				return
			}
			got, err := k.Dump(context.Background(), rs.Table)
			if err != nil {
				t.Fatal(err)
			}
			if d := nft.Diff(nft.Canonical(got), nft.Canonical(rs)); d != "" {
				t.Fatalf("the kernel lists something else than was applied:\n%s", d)
			}
			checkJSON(t, ns, len(rs.Rules))
			reloadListing(t, ns, "rulesetpol2")
		})
	}
}

// TestKernelLongAndOddNames applies the Service (team-a, a 63-character name, a
// 15-character port name, NodePort) and one with names no API server allows (NUL, quotes,
// multi-byte characters, over-long) on the kernel: the batch is accepted, and what the kernel
// lists back equals what was built, so a full resync finds nothing to repair.
func TestKernelLongAndOddNames(t *testing.T) {
	netns.Skip(t)
	b := testBuilder(t, nil)
	odd := longService("a\x00b"+strings.Repeat("é", 150), "q\"u\no"+strings.Repeat("日本", 60), "p\xff")
	odd.Ports[0].ClusterIPs, odd.Ports[0].LoadBalancerIPs, odd.Ports[0].NodePort = addrs("198.19.0.30"), nil, 30081
	rs := b.Ruleset(testNode(), []*model.Service{longService("team-a", strings63, "abcdefghijklm-o"), odd})
	ns := netns.New(t, "rulesetlong")
	k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatalf("NewKernel: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	if _, err := k.Apply(context.Background(), addAll(rs)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	got, err := k.Dump(context.Background(), rs.Table)
	if err != nil {
		t.Fatal(err)
	}
	if d := nft.Diff(nft.Canonical(got), nft.Canonical(rs)); d != "" {
		t.Fatalf("the kernel lists something else than was applied (a full resync would repair it forever):\n%s", d)
	}
	reloadListing(t, ns, "rulesetlong2")
}

// reloadListing loads what nft lists in ns into a fresh namespace (named after prefix) with
// nft -f, and checks it lists the same there: the text a person reads is the ruleset.
func reloadListing(t *testing.T, ns *netns.NS, prefix string) {
	t.Helper()
	listing, err := ns.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatalf("nft list ruleset: %v", err)
	}
	file := filepath.Join(t.TempDir(), "ruleset.nft")
	if err := os.WriteFile(file, []byte(listing), 0o644); err != nil {
		t.Fatal(err)
	}
	ns2 := netns.New(t, prefix)
	if out, err := ns2.Run("nft", "-f", file); err != nil {
		t.Fatalf("nft -f of the listing: %v\n%s\nlisting:\n%s", err, out, listing)
	}
	again, err := ns2.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	if again != listing {
		t.Errorf("nft -f of the listing lists differently:\n got %s\nwant %s", again, listing)
	}
}

// checkJSON reads the ruleset back with `nft -j list ruleset`, independently of our decoder: it
// must hold wantRules rules, none with an expression nft does not understand, and the recording
// of sticky endpoints after DNAT must read as conntrack tuple fields.
func checkJSON(t *testing.T, ns *netns.NS, wantRules int) {
	t.Helper()
	out, err := ns.Run("nft", "-j", "list", "ruleset")
	if err != nil {
		t.Fatalf("nft -j list ruleset: %v", err)
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("nft -j output: %v", err)
	}
	rules, ctRecord, ctLookup := 0, 0, 0
	for _, obj := range doc.Nftables {
		raw, ok := obj["rule"]
		if !ok {
			continue
		}
		rules++
		r := string(raw)
		if strings.Contains(r, `"unknown"`) || strings.Contains(r, `"xt"`) {
			t.Errorf("nft does not understand a rule: %s", r)
		}
		// nft 1.0.6 has no JSON form of a map update: it prints the statement as text.
		if strings.Contains(r, "ct original proto-dst timeout") && strings.Contains(r, ": ct reply ip saddr . ct reply proto-src }") {
			ctRecord++
		}
		if strings.Contains(r, `"vmap"`) && strings.Contains(r, `"dir": "original"`) {
			ctLookup++
		}
	}
	if rules != wantRules {
		t.Errorf("nft -j lists %d rules, want %d", rules, wantRules)
	}
	if ctRecord == 0 || ctLookup == 0 {
		t.Errorf("%d rules record an endpoint from the reply tuple, %d look sticky frontends up by the original one: want some of each", ctRecord, ctLookup)
	}
}

// TestKernelAffinityIPv6Ruleset: an ip6 table with a sticky port of one port number (its own
// map) and one whose endpoints differ in port (a set per endpoint) is what the kernel lists back,
// and `nft -f` of the kernel's listing lists the same text.
func TestKernelAffinityIPv6Ruleset(t *testing.T) {
	netns.Skip(t)
	b, err := NewBuilder(Config{Family: nft.IPv6, MasqueradeMark: 0x4000, DropMark: 0x8000, NodeName: thisNode})
	if err != nil {
		t.Fatal(err)
	}
	sticky := func(name, ip string, eps ...model.Endpoint) *model.Service {
		return &model.Service{Key: model.ServiceKey{Namespace: "default", Name: name}, Ports: []model.ServicePort{{
			Name: pn("default", name, "http", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080, ClusterIPs: addrs(ip),
			AffinityTimeout: time.Minute, Endpoints: eps,
		}}}
	}
	rs := b.Ruleset(nil, []*model.Service{
		sticky("same", "fd00:19::10", ready(8080, "fd00:18::a", "fd00:18::b", "fd00:18::c")...),
		sticky("mixed", "fd00:19::11", append(ready(8080, "fd00:18::a"), ready(9090, "fd00:18::b")...)...),
	})
	ns := netns.New(t, "rulesetaff6")
	k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatalf("NewKernel: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	if _, err := k.Apply(context.Background(), addAll(rs)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	got, err := k.Dump(context.Background(), rs.Table)
	if err != nil {
		t.Fatal(err)
	}
	if d := nft.Diff(nft.Canonical(got), nft.Canonical(rs)); d != "" {
		t.Fatalf("the kernel lists something else than was applied:\n%s", d)
	}
	reloadListing(t, ns, "rulesetaff6b")
}
