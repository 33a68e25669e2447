package ruleset

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// TestInputIsNormalised: the builder's output does not depend on how the sources happened to
// list things. Endpoints in any order, an endpoint listed twice (its ready copy wins), IPv4
// addresses written as IPv4-mapped IPv6, several target ports of an endpoint of a Service that
// keeps the destination port, and node addresses out of order or repeated all build the same
// ruleset as the tidy input. Each case removes one normalisation the golden's tidy input never
// exercises (found by `make mutants`).
func TestInputIsNormalised(t *testing.T) {
	mapped := func(s string) netip.Addr { return netip.AddrFrom16(netip.MustParseAddr(s).As16()) }
	web := func(svcs []*model.Service) *model.ServicePort { return &svcs[0].Ports[0] }
	rtp := func(svcs []*model.Service) *model.ServicePort { return &svcs[1].Ports[0] }
	cases := []struct {
		name string
		svcs func([]*model.Service)
		node func(*model.Node)
	}{
		{"endpoints in reverse order", func(s []*model.Service) { slices.Reverse(web(s).Endpoints) }, nil},
		{"an endpoint listed twice, apart", func(s []*model.Service) {
			eps := web(s).Endpoints
			web(s).Endpoints = append(eps, eps[0])
		}, nil},
		{"a not-ready copy listed before the ready endpoint", func(s []*model.Service) {
			eps := web(s).Endpoints
			stale := model.Endpoint{Addr: eps[0].Addr, Port: eps[0].Port}
			web(s).Endpoints = append([]model.Endpoint{stale}, eps...)
		}, nil},
		{"an endpoint as IPv4-mapped IPv6", func(s []*model.Service) {
			web(s).Endpoints[0].Addr = mapped(pod1)
		}, nil},
		{"a port-keeping Service's endpoint with two target ports", func(s []*model.Service) {
			p := rtp(s)
			p.Endpoints = []model.Endpoint{p.Endpoints[0], p.Endpoints[0]}
			p.Endpoints[0].Port, p.Endpoints[1].Port = 5000, 6000
		}, nil},
		{"an endpoint without a numeric port (a named target port not resolved)", func(s []*model.Service) {
			web(s).Endpoints = append(web(s).Endpoints, model.Endpoint{Addr: netip.MustParseAddr("198.18.128.20"), Ready: true, Serving: true})
		}, nil},
		{"node addresses out of order and repeated", nil, func(n *model.Node) {
			n.Addresses = addrs(nodeBridge, "127.0.0.1", nodeIP, nodeBridge)
		}},
		{"a node address as IPv4-mapped IPv6", nil, func(n *model.Node) {
			n.Addresses[0] = mapped(nodeIP)
		}},
	}
	b := testBuilder(t, nil)
	want := nft.Render(b.Ruleset(testNode(), services()))
	wantBase := b.Base(testNode())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			svcs, node := services(), testNode()
			if c.svcs != nil {
				c.svcs(svcs)
			}
			if c.node != nil {
				c.node(node)
			}
			if got := nft.Render(b.Ruleset(node, svcs)); got != want {
				t.Errorf("ruleset differs from the tidy input's:\n%s\nwant:\n%s", got, want)
			}
			// The base fragment alone (what a partial sync sends) lists each element once.
			if got := b.Base(node); !reflect.DeepEqual(got.Elements, wantBase.Elements) {
				t.Errorf("base fragment elements:\n%v\nwant:\n%v", got.Elements, wantBase.Elements)
			}
		})
	}
}

// TestHairpinElementsOnce: a Service's fragment (what a partial sync sends) holds an endpoint's
// hairpin element once, even when the endpoint is both a cluster-wide and a node-local pick.
// (Other sets may repeat an element within a fragment, a ClusterIP of several ports: Merge and
// the reconciler keep one; the hairpin set has one element per endpoint, the most of any.)
func TestHairpinElementsOnce(t *testing.T) {
	b := policyBuilder(t)
	svcs := append(services(),
		webPort(func(sp *model.ServicePort) {
			sp.ExternalTrafficLocal = true
			sp.Endpoints = append(on(otherNode, pod2), on(thisNode, pod1, pod3)...)
		}),
		webPort(func(sp *model.ServicePort) {
			sp.InternalTrafficLocal = true
			sp.Endpoints = append(on(thisNode, pod3, pod1), on(otherNode, pod2)...)
		}))
	for _, s := range svcs {
		seen := map[string]bool{}
		for _, e := range b.Service(zonedNode(""), s).Elements {
			if e.Set != SetHairpin {
				continue
			}
			if id := fragment.ElementID(&e); seen[id] {
				t.Errorf("%v: element %v in set %s listed twice", s.Key, e.Key, e.Set)
			}
			seen[fragment.ElementID(&e)] = true
		}
	}
}

// TestAddressesOfTheOtherFamilyIgnored: a dual-stack Service's LoadBalancer and external IPs
// of the other family do not make it externally reachable in this family's table; here an
// internalTrafficPolicy Local port without local endpoints stays rejecting, as without them.
func TestAddressesOfTheOtherFamilyIgnored(t *testing.T) {
	b := testBuilder(t, nil)
	build := func(mut func(*model.ServicePort)) string {
		svcs := services()
		rtp := &svcs[1].Ports[0]
		rtp.InternalTrafficLocal = true
		if mut != nil {
			mut(rtp)
		}
		return nft.Render(b.Ruleset(testNode(), svcs))
	}
	want := build(nil)
	got := build(func(sp *model.ServicePort) {
		sp.LoadBalancerIPs, sp.ExternalIPs = addrs("fd00:19::100"), addrs("fd00:19::200")
	})
	if got != want {
		t.Errorf("IPv6 LoadBalancer and external IPs changed the ip table:\n%s\nwant:\n%s", got, want)
	}
}

// TestNoEndpointMapElementsAreIntervals: the no-endpoint map is an interval map (ranges share
// it), so a single port's element carries its end too: the kernel needs both ends of an
// element of a concatenated interval map.
func TestNoEndpointMapElementsAreIntervals(t *testing.T) {
	b := testBuilder(t, nil)
	n := 0
	for _, e := range b.Ruleset(testNode(), services()).Elements[MapNoEndpointServices] {
		n++
		if !reflect.DeepEqual(e.KeyEnd, e.Key) {
			t.Errorf("no-endpoint element %v: end %v, want the key itself (a one-port interval)", e.Key, e.KeyEnd)
		}
	}
	if n == 0 {
		t.Fatalf("no element in %s: the test cluster's Service without endpoints should have one", MapNoEndpointServices)
	}
}

// TestAffinityEndpointsDeclared: a ClientIP-affinity port declares to the reconciler each
// endpoint its rules may record into the affinity map (Fragment.Recorded; no rule names them),
// once each, an endpoint picked both cluster-wide and node-locally included: without them the
// reconciler's prune would take the Service's live affinity entries for stale ones.
func TestAffinityEndpointsDeclared(t *testing.T) {
	svc := webPort(func(sp *model.ServicePort) {
		sp.AffinityTimeout, sp.ExternalTrafficLocal = time.Minute, true
		sp.Endpoints = append(on(thisNode, pod1), on(otherNode, pod2)...)
	})
	f := policyBuilder(t).Service(testNode(), svc)
	var got []string
	for _, r := range f.Recorded {
		got = append(got, fmt.Sprintf("%s %v", r.Set, r.Data))
	}
	slices.Sort(got)
	want := []string{
		fmt.Sprintf("%s %v", MapAffinity, []nft.Value{nft.Addr(netip.MustParseAddr(pod1)), nft.Port(8080)}),
		fmt.Sprintf("%s %v", MapAffinity, []nft.Value{nft.Addr(netip.MustParseAddr(pod2)), nft.Port(8080)}),
	}
	if !slices.Equal(got, want) {
		t.Errorf("recorded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestRejectedServiceBuildsNothing: a Service the model rejected (its reason is reported
// elsewhere) adds nothing to the ruleset, whatever ports it lists.
func TestRejectedServiceBuildsNothing(t *testing.T) {
	svc := services()[0]
	svc.Rejected = &model.Rejection{Reason: "range-end-before-start", Message: "x"}
	f := testBuilder(t, nil).Service(testNode(), svc)
	if len(f.Chains)+len(f.Sets)+len(f.Elements)+len(f.Recorded) != 0 {
		t.Errorf("rejected Service's fragment: %+v, want it empty", f)
	}
}

// TestSourceRangesOnlyWithLoadBalancerIPs: loadBalancerSourceRanges filter traffic to the
// LoadBalancer IPs only: a port without LoadBalancer IPs of this family builds the same
// ruleset with or without them.
func TestSourceRangesOnlyWithLoadBalancerIPs(t *testing.T) {
	b := testBuilder(t, nil)
	build := func(ranges bool) string {
		svcs := services()
		web := &svcs[0].Ports[0]
		web.LoadBalancerIPs = addrs("fd00:19::100")
		if ranges {
			web.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24")}
		}
		return nft.Render(b.Ruleset(testNode(), svcs))
	}
	if got, want := build(true), build(false); got != want {
		t.Errorf("source ranges changed a port without LoadBalancer IPs:\n%s\nwant:\n%s", got, want)
	}
}

// TestAllPortsNoEndpointElementIsNoInterval: the all-ports no-endpoint map is a plain map
// (address . protocol): its elements carry no interval end, which only an interval map takes.
func TestAllPortsNoEndpointElementIsNoInterval(t *testing.T) {
	svcs := services()
	svcs[2].Ports[0].Endpoints = nil
	els := testBuilder(t, nil).Ruleset(testNode(), svcs).Elements[MapNoEndpointAllPorts]
	if len(els) == 0 {
		t.Fatalf("no element in %s for the all-ports Service without endpoints", MapNoEndpointAllPorts)
	}
	for _, e := range els {
		if e.KeyEnd != nil {
			t.Errorf("%s element %v has an interval end %v", MapNoEndpointAllPorts, e.Key, e.KeyEnd)
		}
	}
}

// TestSCTPServiceProgrammed: an SCTP port is programmed as TCP and UDP ports are, with
// protocol 132 in its keys.
func TestSCTPServiceProgrammed(t *testing.T) {
	svcs := services()
	web := &svcs[0].Ports[0]
	web.Name.Protocol = model.SCTP
	for _, e := range testBuilder(t, nil).Ruleset(testNode(), svcs).Elements[MapServiceIPs] {
		if len(e.Key) == 3 && e.Key[0] == nft.Addr(netip.MustParseAddr(webIP)) && reflect.DeepEqual(e.Key[1], nft.Proto(132)) {
			return
		}
	}
	t.Errorf("no %s element for the SCTP port of %s", MapServiceIPs, webIP)
}

// TestBitMask: every bit of the 32-bit mark is usable, bit 0 included; others are refused.
func TestBitMask(t *testing.T) {
	for bit, want := range map[int]uint32{0: 1, 14: 0x4000, 31: 0x80000000} {
		if got, err := BitMask(bit); err != nil || got != want {
			t.Errorf("BitMask(%d) = %#x, %v; want %#x", bit, got, err, want)
		}
	}
	for _, bit := range []int{-1, 32} {
		if _, err := BitMask(bit); err == nil {
			t.Errorf("BitMask(%d): no error, want one", bit)
		}
	}
}

// TestExternalAddressesWithoutEndpointsReject: a LoadBalancer or external IP of a port
// without endpoints goes to the no-endpoint map (reject), as its ClusterIP does.
func TestExternalAddressesWithoutEndpointsReject(t *testing.T) {
	svcs := services()
	svcs[0].Ports[0].Endpoints = nil
	rs := testBuilder(t, nil).Ruleset(testNode(), svcs)
	for _, ip := range []string{webIP, lbIP, extIP} {
		found := false
		for _, e := range rs.Elements[MapNoEndpointServices] {
			found = found || e.Key[0] == nft.Addr(netip.MustParseAddr(ip))
		}
		for _, e := range rs.Elements[MapServiceIPs] {
			if e.Key[0] == nft.Addr(netip.MustParseAddr(ip)) {
				t.Errorf("%s of a port without endpoints is in %s", ip, MapServiceIPs)
			}
		}
		if !found {
			t.Errorf("%s of a port without endpoints is not in %s", ip, MapNoEndpointServices)
		}
	}
}
