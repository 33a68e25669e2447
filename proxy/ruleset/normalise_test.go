package ruleset

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
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
