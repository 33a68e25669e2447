package ruleset

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// usable returns the endpoints of this family that could take traffic, whatever their
// conditions (model.CategorizeEndpoints chooses among them): a numeric port is required unless
// the Service keeps the destination port. Sorted by address and port, deduplicated.
func (b *Builder) usable(sp *model.ServicePort) []model.Endpoint {
	keepPort := sp.KeepsPort()
	eps := b.endpoints(len(sp.Endpoints))
	for _, ep := range sp.Endpoints {
		a := ep.Addr.Unmap()
		if !a.IsValid() || a.Is4() != (b.cfg.Family == nft.IPv4) {
			continue
		}
		if !keepPort && ep.Port == 0 {
			continue
		}
		if keepPort {
			ep.Port = 0
		}
		ep.Addr = a
		eps = append(eps, ep)
	}
	sort.SliceStable(eps, func(i, j int) bool {
		if eps[i].Addr != eps[j].Addr {
			return eps[i].Addr.Less(eps[j].Addr)
		}
		return eps[i].Port < eps[j].Port
	})
	out := eps[:0] // in place: each kept endpoint is written at or before where it was read
	for i, ep := range eps {
		if i > 0 && ep.Addr == eps[i-1].Addr && ep.Port == eps[i-1].Port {
			if ep.Ready && !out[len(out)-1].Ready {
				out[len(out)-1] = ep // a ready copy wins
			}
			continue
		}
		out = append(out, ep)
	}
	return out
}

// endpointChain adds an own chain (own-chains mode: ranges, all-ports, node-port blocks,
// ClientIP affinity) that DNATs to one of eps: straight to a single endpoint, through a cascade
// of numgen matches for several, or, with ClientIP affinity, through the affinity rules. No
// named map: a per-Service set would make every later set operation of the table slower
// (the kernel walks a list of the table's sets).
func (b *Builder) endpointChain(f *fragment.Fragment, p *portPlan, chain string, eps []model.Endpoint) {
	var rs []nft.Rule
	switch {
	case p.sp.AffinityTimeout > 0 && b.cfg.Family == nft.IPv4: // keepPort: others are shared
		rs = b.affinityMapRules(f, p, eps)
	case p.sp.AffinityTimeout > 0 && samePort(eps):
		rs = b.affinityPortMapRules(f, p, eps)
	case p.sp.AffinityTimeout > 0:
		rs = b.affinityRules(f, p, eps)
	default:
		rs = b.cascade(p, eps, func(model.Endpoint) []nft.Expr { return nil })
	}
	f.Chains = append(f.Chains, fragment.ChainDef{Chain: nft.Chain{Name: chain}, Rules: withChain(chain, rs)})
}

// cascade picks one of eps uniformly: rule i (from 0) matches "numgen random mod N-i 0" and
// DNATs to eps[i], so it wins with probability 1/(N-i) once the earlier ones missed and each
// endpoint gets 1/N; the last rule takes what is left. before(ep) are the statements run before
// the DNAT of ep (the affinity update). One endpoint is a plain DNAT.
func (b *Builder) cascade(p *portPlan, eps []model.Endpoint, before func(model.Endpoint) []nft.Expr) []nft.Rule {
	if len(eps) == 1 {
		return []nft.Rule{rule(comment(p.name, ": 1 endpoint"), append(before(eps[0]), b.dnat(p, eps[0])...)...)}
	}
	rs := make([]nft.Rule, 0, len(eps))
	for i, ep := range eps {
		var ex []nft.Expr
		if n := uint32(len(eps) - i); n > 1 {
			ex = append(ex, nft.NumgenMatch{Modulus: n, Value: 0})
		}
		ex = append(append(ex, before(ep)...), b.dnat(p, ep)...)
		rs = append(rs, rule(comment(p.name, fmt.Sprintf(": endpoint %d of %d", i+1, len(eps))), ex...))
	}
	return rs
}

// dnat is "[meta l4proto P] dnat to ep": the protocol match nft requires before a port.
func (b *Builder) dnat(p *portPlan, ep model.Endpoint) []nft.Expr {
	if p.keepPort {
		return []nft.Expr{nft.DNAT{Addr: ep.Addr}}
	}
	return []nft.Expr{protoCmp(p.proto), nft.DNAT{Addr: ep.Addr, Port: ep.Port}}
}

// affinityKey is the key of the shared affinity maps: the client, then the packet's frontend.
func affinityKey() []nft.Field {
	return []nft.Field{nft.FieldSaddr, nft.FieldDaddr, nft.FieldL4Proto, nft.FieldDport}
}

// affinityMapRules implement sessionAffinity ClientIP in an ip table for a port that keeps the
// destination port (ranges, all-ports, node-port blocks: own-chains mode), with the shared map
// affinity-addr (README.md, "sessionAffinity ClientIP"); single ports are in shared mode.
//
//	jump affinity-hit-addr-<T>s              a known client: refresh, DNAT to its endpoint
//	numgen random mod N-i 0 update @affinity-addr { client . frontend timeout T : EP_i } dnat to EP_i
//	numgen random mod N-i 0 dnat to EP_i     only when the map refused the update
//
// The hit lives in a chain shared by every such port with the same timeout: a rule that reads a
// map binds it, and each binding makes the kernel walk every element of the map, so no per-port
// chain may read it; an update statement binds without that walk. An update into a full map
// fails and stops its rule, so the plain cascade after the recording one still DNATs every new
// connection (unrecorded).
func (b *Builder) affinityMapRules(f *fragment.Fragment, p *portPlan, eps []model.Endpoint) []nft.Rule {
	t := p.sp.AffinityTimeout
	hit := AffinityHitChain(true, t)
	// The refresh's data is never stored: on an element that exists the kernel keeps its data.
	addChain(f, hit, rule("sticky client: refresh its entry, DNAT to its endpoint",
		nft.CmpSet{Fields: affinityKey(), Set: MapAffinityAddr},
		nft.SetUpdate{Fields: affinityKey(), Set: MapAffinityAddr, Timeout: t, Data: []nft.Value{nft.Addr(netip.IPv4Unspecified())}},
		nft.DNATMap{Fields: affinityKey(), Map: MapAffinityAddr}))
	rs := []nft.Rule{rule(comment(p.name, ": affinity"), jump(hit))}
	for i, ep := range eps {
		var ex []nft.Expr
		if n := uint32(len(eps) - i); n > 1 {
			ex = append(ex, nft.NumgenMatch{Modulus: n, Value: 0})
		}
		ex = append(ex, nft.SetUpdate{Fields: affinityKey(), Set: MapAffinityAddr, Timeout: t, Data: []nft.Value{nft.Addr(ep.Addr)}},
			nft.DNAT{Addr: ep.Addr})
		rs = append(rs, rule(comment(p.name, fmt.Sprintf(": new client, endpoint %d of %d", i+1, len(eps))), ex...))
	}
	return append(rs, b.cascade(p, eps, func(model.Endpoint) []nft.Expr { return nil })...)
}

// samePort reports whether every endpoint has the same port (0 for ports that keep the port).
func samePort(eps []model.Endpoint) bool {
	for _, ep := range eps {
		if ep.Port != eps[0].Port {
			return false
		}
	}
	return true
}

// affinityPortMapRules implement sessionAffinity ClientIP in an ip6 table when the port's
// endpoints share one port number: a dynamic map of the port's own, client -> endpoint address
// (AffinityMap), shared by its svc- and local- chains, the port a constant of the DNAT:
//
//	meta l4proto tcp ip6 saddr @M update @M { ip6 saddr timeout T : :: } dnat to ip6 saddr map @M:8080
//	numgen random mod N-i 0 meta l4proto tcp update @M { ip6 saddr timeout T : EP_i } dnat to [EP_i]:8080
//	numgen random mod N-i 0 meta l4proto tcp dnat to [EP_i]:8080     only when the map is full
//
// The key is the client alone: nft 1.0.6 writes an update with data only for keys of at most 16
// bytes and, in ip6, data of one field, so no shared "client . frontend" map here; stickiness
// is per Service port across its frontends, as upstream's. One map per sticky port instead of a
// set per endpoint. The hit reads the port's own map, so rewriting the chain walks that map's
// entries only.
func (b *Builder) affinityPortMapRules(f *fragment.Fragment, p *portPlan, eps []model.Endpoint) []nft.Rule {
	m, t, saddr := AffinityMap(p.sp.Name), p.sp.AffinityTimeout, []nft.Field{nft.FieldSaddr}
	if !slices.ContainsFunc(f.Sets, func(s nft.Set) bool { return s.Name == m }) {
		addr := b.cfg.Family.AddrType()
		f.Sets = append(f.Sets, nft.Set{Name: m, Key: []nft.Type{addr}, Data: []nft.Type{addr}, Dynamic: true, HasTimeout: true,
			Size: b.cfg.affinityMapSize(), Comment: comment(p.name, " client -> endpoint")})
	}
	var proto []nft.Expr
	if !p.keepPort {
		proto = []nft.Expr{protoCmp(p.proto)}
	}
	hit := append(append([]nft.Expr{}, proto...), nft.CmpSet{Fields: saddr, Set: m},
		nft.SetUpdate{Fields: saddr, Set: m, Timeout: t, Data: []nft.Value{nft.Addr(netip.IPv6Unspecified())}},
		nft.DNATMap{Fields: saddr, Map: m, Port: eps[0].Port})
	rs := []nft.Rule{rule(comment(p.name, ": affinity"), hit...)}
	for i, ep := range eps {
		var ex []nft.Expr
		if n := uint32(len(eps) - i); n > 1 {
			ex = append(ex, nft.NumgenMatch{Modulus: n, Value: 0})
		}
		ex = append(append(ex, proto...), nft.SetUpdate{Fields: saddr, Set: m, Timeout: t, Data: []nft.Value{nft.Addr(ep.Addr)}},
			nft.DNAT{Addr: ep.Addr, Port: ep.Port})
		rs = append(rs, rule(comment(p.name, fmt.Sprintf(": new client, endpoint %d of %d", i+1, len(eps))), ex...))
	}
	return append(rs, b.cascade(p, eps, func(model.Endpoint) []nft.Expr { return nil })...)
}

// affinityRules implement sessionAffinity ClientIP in an ip6 table whose endpoints differ in
// their port (the map's data cannot hold one there). Each endpoint has its own dynamic set of
// client addresses whose elements expire after the affinity timeout (AffinitySet). A client
// found in an endpoint's set goes back to that endpoint and refreshes its entry; a new client
// gets an endpoint picked uniformly by a chain of "numgen random mod N-i 0" matches (the i-th
// rule wins with probability 1/(N-i) once the earlier ones missed, so each endpoint gets 1/N),
// and the winning rule records the client in that endpoint's set. No per-endpoint chains: the
// cost is two rules per endpoint, in this Service's own chain.
func (b *Builder) affinityRules(f *fragment.Fragment, p *portPlan, eps []model.Endpoint) []nft.Rule {
	var sticky []nft.Rule
	for _, ep := range eps {
		set := b.affinitySet(f, p, ep)
		sticky = append(sticky, rule(comment(p.name, ": affinity"), append([]nft.Expr{
			nft.CmpSet{Fields: []nft.Field{nft.FieldSaddr}, Set: set}, affinityUpdate(set)}, b.dnat(p, ep)...)...))
	}
	pick := b.cascade(p, eps, func(ep model.Endpoint) []nft.Expr {
		return []nft.Expr{affinityUpdate(b.affinitySet(f, p, ep))}
	})
	return append(sticky, pick...)
}

// affinitySet adds the endpoint's set of clients to f (once: the Cluster and Local chains share
// it) and returns its name.
func (b *Builder) affinitySet(f *fragment.Fragment, p *portPlan, ep model.Endpoint) string {
	set := AffinitySet(p.sp.Name, netip.AddrPortFrom(ep.Addr, ep.Port))
	if !slices.ContainsFunc(f.Sets, func(s nft.Set) bool { return s.Name == set }) {
		// The size the kernel gives a dynamic set anyway, said here so a read-back equals it.
		f.Sets = append(f.Sets, nft.Set{Name: set, Key: []nft.Type{b.cfg.Family.AddrType()}, Dynamic: true,
			Timeout: p.sp.AffinityTimeout, Size: nft.DynsetDefaultSize, Comment: comment(p.name, " clients of "+endpointText(ep))})
	}
	return set
}

func affinityUpdate(set string) nft.SetUpdate {
	return nft.SetUpdate{Fields: []nft.Field{nft.FieldSaddr}, Set: set}
}

func endpointText(ep model.Endpoint) string {
	if ep.Port == 0 {
		return ep.Addr.String()
	}
	return netip.AddrPortFrom(ep.Addr, ep.Port).String()
}

// firewall adds the fw- chain, the target of the port's LoadBalancer IPs when it has
// loadBalancerSourceRanges: sources outside the ranges get the drop bit and no DNAT, the rest
// go on to target, where the LoadBalancer IPs would go without ranges (the ext- chain, or in
// shared mode the shared masq-pick-N or local-M-of-N chain). As upstream, the LoadBalancer IPs themselves are allowed sources when
// a node address is inside a range (a node reaching a VIP it holds locally uses the VIP as its
// source). Node ports and external IPs are not filtered (upstream's KEP non-goal).
func (b *Builder) firewall(f *fragment.Fragment, node *model.Node, p *portPlan, target string) {
	set, chain := SourceRangesSet(p.sp.Name), FirewallChain(p.sp.Name)
	allowed := append([]netip.Prefix(nil), p.srcRanges...)
	var nodeAddrs []netip.Addr
	if node != nil {
		nodeAddrs = b.cfg.ofFamily(node.Addresses)
	}
	for _, a := range nodeAddrs {
		if anyContains(p.srcRanges, a) {
			for _, lb := range p.lbIPs {
				allowed = append(allowed, netip.PrefixFrom(lb, lb.BitLen()))
			}
			break
		}
	}
	f.Sets = append(f.Sets, nft.Set{Name: set, Key: []nft.Type{b.cfg.Family.AddrType()}, Interval: true,
		Comment: comment(p.name, " loadBalancerSourceRanges")})
	for _, r := range mergePrefixes(allowed) {
		f.Elements = append(f.Elements, nft.Element{Set: set, Key: []nft.Value{nft.Addr(r[0])}, KeyEnd: []nft.Value{nft.Addr(r[1])}})
	}
	f.Chains = append(f.Chains, fragment.ChainDef{Chain: nft.Chain{Name: chain}, Rules: withChain(chain, []nft.Rule{
		rule(comment(p.name, ": source outside loadBalancerSourceRanges: drop"),
			nft.CmpSet{Fields: []nft.Field{nft.FieldSaddr}, Neg: true, Set: set}, nft.MarkOr{Bits: b.cfg.DropMark}, nft.Verdict{Kind: nft.VerdictReturn}),
		rule("", goTo(target)),
	})})
}

// mergePrefixes turns prefixes into sorted, disjoint inclusive address ranges (an interval set
// refuses overlapping elements); overlapping and adjacent ranges are joined.
func mergePrefixes(ps []netip.Prefix) [][2]netip.Addr {
	rs := make([][2]netip.Addr, 0, len(ps))
	for _, p := range ps {
		p = p.Masked()
		rs = append(rs, [2]netip.Addr{p.Addr(), lastAddr(p)})
	}
	sort.Slice(rs, func(i, j int) bool { return rs[i][0].Less(rs[j][0]) })
	var out [][2]netip.Addr
	for _, r := range rs {
		if n := len(out); n > 0 {
			last := &out[n-1]
			if next := last[1].Next(); !next.IsValid() || !next.Less(r[0]) {
				if last[1].Less(r[1]) {
					last[1] = r[1]
				}
				continue
			}
		}
		out = append(out, r)
	}
	return out
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
