package ruleset

import (
	"fmt"
	"net/netip"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

func protoNumber(p model.Protocol) (uint8, bool) {
	switch p {
	case model.TCP:
		return unix.IPPROTO_TCP, true
	case model.UDP:
		return unix.IPPROTO_UDP, true
	case model.SCTP:
		return unix.IPPROTO_SCTP, true
	}
	return 0, false
}

// Service returns the fragment of one Service in this builder's family: nothing for a rejected
// Service or one without an address of this family.
func (b *Builder) Service(svc *model.Service) Fragment {
	var f Fragment
	if svc == nil || svc.Rejected != nil {
		return f
	}
	for i := range svc.Ports {
		b.servicePort(&f, &svc.Ports[i])
	}
	return f
}

// portKey is the dispatch key of a ServicePort on one address: "addr . proto . port", with an
// inclusive end for ranges, or "addr . proto" for all-ports.
func portKey(a netip.Addr, proto uint8, sp *model.ServicePort) (key, end []nft.Value) {
	if sp.AllPorts {
		return []nft.Value{nft.Addr(a), nft.Proto(proto)}, nil
	}
	key = []nft.Value{nft.Addr(a), nft.Proto(proto), nft.Port(sp.Port)}
	if sp.IsRange() {
		end = []nft.Value{nft.Addr(a), nft.Proto(proto), nft.Port(sp.PortEnd)}
	}
	return key, end
}

func (b *Builder) servicePort(f *Fragment, sp *model.ServicePort) {
	proto, ok := protoNumber(sp.Name.Protocol)
	if !ok {
		return
	}
	cips := b.cfg.ofFamily(sp.ClusterIPs)
	if len(cips) == 0 {
		// Not a Service of this family: its node ports and external addresses belong to the
		// family of its ClusterIP.
		return
	}
	external := append(b.cfg.ofFamily(sp.LoadBalancerIPs), b.cfg.ofFamily(sp.ExternalIPs)...)
	if sp.AllPorts {
		// all-ports never applies to external IPs (validation rejects them; be safe anyway).
		external = b.cfg.ofFamily(sp.LoadBalancerIPs)
	}
	name := sp.Name.String()
	svcChain, extChain := ServiceChain(sp.Name), ExternalChain(sp.Name)
	eps := b.endpoints(sp)
	hasExternal := len(external) > 0 || b.nodePorts(sp)

	for _, a := range cips {
		f.Elements = append(f.Elements, nft.Element{Set: SetClusterIPs, Key: []nft.Value{nft.Addr(a)}})
	}

	dispatch, noEndpoints := MapServiceIPs, MapNoEndpointServices
	switch {
	case sp.AllPorts:
		dispatch, noEndpoints = MapServiceAllPorts, MapNoEndpointAllPorts
	case sp.IsRange():
		dispatch = MapServiceRanges
	}
	reject := &nft.Verdict{Kind: nft.VerdictGoto, Chain: ChainReject}
	target := func(chain string) *nft.Verdict {
		if len(eps) == 0 {
			return reject
		}
		return &nft.Verdict{Kind: nft.VerdictGoto, Chain: chain}
	}
	mapFor := func() string {
		if len(eps) == 0 {
			return noEndpoints
		}
		return dispatch
	}
	addDispatch := func(a netip.Addr, chain string) {
		key, end := portKey(a, proto, sp)
		if mapFor() == MapNoEndpointServices && end == nil {
			end = key // the no-endpoint map is an interval map: a single port is a one-port interval
		}
		f.Elements = append(f.Elements, nft.Element{Set: mapFor(), Key: key, KeyEnd: end, Verdict: target(chain), Comment: name})
	}
	for _, a := range cips {
		addDispatch(a, svcChain)
	}
	for _, a := range external {
		addDispatch(a, extChain)
	}
	if b.nodePorts(sp) {
		npMap := MapNodePorts
		if len(eps) == 0 {
			npMap = MapNoEndpointNodePorts
		}
		end := sp.NodePortEnd
		if end < sp.NodePort {
			end = sp.NodePort
		}
		f.Elements = append(f.Elements, nft.Element{
			Set:     npMap,
			Key:     []nft.Value{nft.Proto(proto), nft.Port(sp.NodePort)},
			KeyEnd:  []nft.Value{nft.Proto(proto), nft.Port(end)},
			Verdict: target(extChain), Comment: name,
		})
	}
	if len(eps) == 0 {
		return
	}

	keepPort := sp.AllPorts || sp.IsRange()
	f.Chains = append(f.Chains, ChainDef{Chain: nft.Chain{Name: svcChain}, Rules: withChain(svcChain, b.serviceRules(f, sp, proto, eps, keepPort))})
	if hasExternal {
		f.Chains = append(f.Chains, ChainDef{Chain: nft.Chain{Name: extChain}, Rules: withChain(extChain, []nft.Rule{
			rule(name+": masquerade traffic from outside the cluster", nft.MarkOr{Bits: b.cfg.MasqueradeMark}),
			rule("", goTo(svcChain)),
		})})
	}
	for _, ep := range eps {
		f.Elements = append(f.Elements, nft.Element{Set: SetHairpin, Key: []nft.Value{nft.Addr(ep.Addr), nft.Addr(ep.Addr)}})
	}
}

// nodePorts reports whether the port has node ports to program: all-ports Services never do,
// even when the API server allocated some.
func (b *Builder) nodePorts(sp *model.ServicePort) bool {
	return sp.NodePort != 0 && !sp.AllPorts
}

// serviceRules marks for masquerade when needed, then DNATs: straight to the one endpoint, or
// through the Service's numgen map.
func (b *Builder) serviceRules(f *Fragment, sp *model.ServicePort, proto uint8, eps []model.Endpoint, keepPort bool) []nft.Rule {
	name := sp.Name.String()
	var rs []nft.Rule
	switch cidrs := b.cfg.prefixesOfFamily(b.cfg.ClusterCIDRs); {
	case b.cfg.MasqueradeAll:
		rs = append(rs, rule(name+": masquerade all", nft.MarkOr{Bits: b.cfg.MasqueradeMark}))
	case len(cidrs) > 0:
		var ex []nft.Expr
		for _, p := range cidrs {
			ex = append(ex, nft.CmpPrefix{Field: nft.FieldSaddr, Neg: true, Prefix: p})
		}
		ex = append(ex, nft.MarkOr{Bits: b.cfg.MasqueradeMark})
		rs = append(rs, rule(name+": masquerade traffic from outside the cluster", ex...))
	}
	if len(eps) == 1 {
		port := eps[0].Port
		if keepPort {
			port = 0
		}
		return append(rs, rule(fmt.Sprintf("%s: 1 endpoint", name), protoCmp(proto), nft.DNAT{Addr: eps[0].Addr, Port: port}))
	}
	epMap := EndpointMap(sp.Name)
	set := nft.Set{Name: epMap, Key: []nft.Type{nft.TypeInteger}, Data: []nft.Type{b.cfg.Family.AddrType()},
		NumgenKey: uint32(len(eps)), Comment: name + " endpoints"}
	if !keepPort {
		set.Data = append(set.Data, nft.TypeInetService)
	}
	f.Sets = append(f.Sets, set)
	for i, ep := range eps {
		data := []nft.Value{nft.Addr(ep.Addr)}
		if !keepPort {
			data = append(data, nft.Port(ep.Port))
		}
		f.Elements = append(f.Elements, nft.Element{Set: epMap, Key: []nft.Value{nft.Int(uint32(i))}, Data: data})
	}
	return append(rs, rule(fmt.Sprintf("%s: %d endpoints", name, len(eps)), protoCmp(proto),
		nft.DNATNumgen{Modulus: uint32(len(eps)), Map: epMap, WithPort: !keepPort}))
}

// endpoints picks the endpoints of this family that get new connections: the ready ones, or,
// when none is ready, the serving ones that are terminating (KEP-1669). A numeric port is
// required unless the Service keeps the destination port. Sorted by address, deduplicated.
func (b *Builder) endpoints(sp *model.ServicePort) []model.Endpoint {
	keepPort := sp.AllPorts || sp.IsRange()
	var ready, terminating []model.Endpoint
	for _, ep := range sp.Endpoints {
		a := ep.Addr.Unmap()
		if !a.IsValid() || a.Is4() != (b.cfg.Family == nft.IPv4) {
			continue
		}
		if !keepPort && ep.Port == 0 {
			continue
		}
		ep.Addr = a
		switch {
		case ep.Ready:
			ready = append(ready, ep)
		case ep.Serving && ep.Terminating:
			terminating = append(terminating, ep)
		}
	}
	eps := ready
	if len(eps) == 0 {
		eps = terminating
	}
	sort.Slice(eps, func(i, j int) bool {
		if eps[i].Addr != eps[j].Addr {
			return eps[i].Addr.Less(eps[j].Addr)
		}
		return eps[i].Port < eps[j].Port
	})
	var out []model.Endpoint
	for i, ep := range eps {
		if i > 0 && ep.Addr == eps[i-1].Addr && ep.Port == eps[i-1].Port {
			continue
		}
		out = append(out, ep)
	}
	return out
}
