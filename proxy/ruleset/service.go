package ruleset

import (
	"net/netip"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
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

// Service returns the fragment of one Service in this builder's family, on node: nothing for a
// rejected Service or one without an address of this family. The node's zone selects
// topology-aware endpoints and its addresses decide whether the node's own traffic to a
// LoadBalancer IP passes loadBalancerSourceRanges, so a Service's fragment must be rebuilt when
// the node's zone label or addresses change. Endpoints are local when their NodeName is
// Config.NodeName.
func (b *Builder) Service(node *model.Node, svc *model.Service) fragment.Fragment {
	var f fragment.Fragment
	b.service(&f, node, svc)
	return f
}

// service adds svc's ports to f (nothing for a rejected Service).
func (b *Builder) service(f *fragment.Fragment, node *model.Node, svc *model.Service) {
	if svc == nil || svc.Rejected != nil {
		return
	}
	for i := range svc.Ports {
		b.servicePort(f, node, &svc.Ports[i])
	}
	b.healthCheckPort(f, svc)
}

// healthCheckPort adds the Service's health-check node port to the shared set, in every family
// whatever the Service's own (a listener on the node answers a probe in either family, as
// kube-proxy's does).
func (b *Builder) healthCheckPort(f *fragment.Fragment, svc *model.Service) {
	if b.cfg.HealthCheckPort == 0 {
		return
	}
	for i := range svc.Ports {
		if sp := &svc.Ports[i]; sp.ExternalTrafficLocal && sp.HealthCheckNodePort != 0 {
			key := b.values(1)
			f.Elements = append(f.Elements, nft.Element{Set: SetHealthCheckPorts, Key: append(key, nft.Port(sp.HealthCheckNodePort)),
				Comment: comment(svc.Key.String(), "")})
			return
		}
	}
}

// ServiceScratch is Service building the fragment's elements in memory the builder reuses: its
// Elements, their keys and their data are valid until the next ServiceScratch call on b (its
// chains, rules and sets are the caller's, as Service's). The proxier hands each fragment to
// the reconciler, which keeps its elements packed, before it builds the next: a full sync then
// builds its elements without making garbage of them, which would set how high the heap grows
// (the garbage collector lets the heap reach twice what is live; bench/README.md, "Sizes the
// code's layout rests on").
func (b *Builder) ServiceScratch(node *model.Node, svc *model.Service) fragment.Fragment {
	b.sc.on, b.sc.vals, b.sc.eps = true, b.sc.vals[:0], b.sc.eps[:0]
	defer func() { b.sc.on = false }()
	f := fragment.Fragment{Elements: b.sc.elems[:0]}
	b.service(&f, node, svc)
	b.sc.elems = f.Elements[:0]
	if len(f.Elements) == 0 {
		f.Elements = nil // as Service's: an empty fragment removes its owner
	}
	return f
}

// scratch is the memory ServiceScratch reuses from one call to the next.
type scratch struct {
	on    bool
	elems []nft.Element
	vals  []nft.Value      // a slab the elements' keys and data are cut from
	eps   []model.Endpoint // a slab each port's usable endpoints are cut from
}

// scratchSlab is how many values one scratch slab holds (128 KiB): a Service's slots take ten
// or so per endpoint and frontend.
const scratchSlab = 4096

// values returns an empty slice with room for n values, for an element's key or data: cut from
// the scratch slab in ServiceScratch (capped, so an append past n copies), new otherwise.
func (b *Builder) values(n int) []nft.Value {
	if !b.sc.on {
		return make([]nft.Value, 0, n)
	}
	if len(b.sc.vals)+n > cap(b.sc.vals) {
		// The old slab stays with the elements cut from it until the caller is done with them.
		b.sc.vals = make([]nft.Value, 0, max(scratchSlab, n))
	}
	l := len(b.sc.vals)
	b.sc.vals = b.sc.vals[:l+n]
	return b.sc.vals[l : l : l+n]
}

// endpoints returns an empty slice with room for n endpoints, for a port's usable endpoints:
// cut from the scratch slab in ServiceScratch (they are read while the port is built, never
// kept in its fragment), new otherwise.
func (b *Builder) endpoints(n int) []model.Endpoint {
	if !b.sc.on {
		return make([]model.Endpoint, 0, n)
	}
	if len(b.sc.eps)+n > cap(b.sc.eps) {
		b.sc.eps = make([]model.Endpoint, 0, max(scratchSlab/4, n))
	}
	l := len(b.sc.eps)
	b.sc.eps = b.sc.eps[:l+n]
	return b.sc.eps[l : l : l+n]
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

// portPlan is what one ServicePort needs in one family: its addresses, its endpoints by traffic
// policy, and which chains exist.
type portPlan struct {
	sp                  *model.ServicePort // with this family's external addresses only
	proto               uint8
	name                string
	keepPort            bool
	cips, lbIPs, extIPs []netip.Addr
	cat                 model.EndpointCategories
	// shared: the port has no chain of its own (single port; with ClientIP affinity only in
	// ip tables); its frontends hold slots in the shared endpoint maps (shared.go).
	shared         bool
	shard          int  // shared mode: the endpoint-map shard of the Service (endpointShard)
	cluster, local bool // own-chains mode: the svc- and local- chains exist
	ext            bool // external frontends have somewhere to go (own-chains mode: the ext- chain)
	fw             bool // the fw- chain exists
	srcRanges      []netip.Prefix
}

func (b *Builder) planPort(node *model.Node, sp *model.ServicePort) (*portPlan, bool) {
	proto, ok := protoNumber(sp.Name.Protocol)
	if !ok {
		return nil, false
	}
	p := &portPlan{proto: proto, name: sp.Name.String(), keepPort: sp.KeepsPort()}
	// ClientIP affinity is shared too in ip tables; ip6 keeps a map per sticky port (README.md,
	// "sessionAffinity ClientIP").
	p.shared = !p.keepPort && (sp.AffinityTimeout == 0 || b.cfg.Family == nft.IPv4)
	p.shard = endpointShard(sp.Name.Service, b.cfg.endpointShards())
	p.cips = b.cfg.ofFamily(sp.ClusterIPs)
	if len(p.cips) == 0 {
		// Not a Service of this family: its node ports and external addresses belong to the
		// family of its ClusterIP.
		return nil, false
	}
	p.lbIPs = b.cfg.ofFamily(sp.LoadBalancerIPs)
	if !sp.AllPorts {
		// all-ports never applies to external IPs (validation rejects them; be safe anyway).
		p.extIPs = b.cfg.ofFamily(sp.ExternalIPs)
	}
	fam := *sp
	fam.LoadBalancerIPs, fam.ExternalIPs = p.lbIPs, p.extIPs
	p.sp = &fam
	p.cat = model.CategorizeEndpoints(p.sp, b.usable(sp), b.cfg.NodeName, node.Zone())
	external := p.sp.ExternallyAccessible()
	p.cluster = len(p.cat.Cluster) > 0 && (!sp.InternalTrafficLocal || external)
	p.local = len(p.cat.Local) > 0
	p.ext = p.cat.HasAny && external && len(p.cat.Cluster) > 0
	if len(p.lbIPs) > 0 && p.cat.HasAny {
		p.srcRanges = b.cfg.prefixesOfFamily(sp.LoadBalancerSourceRanges)
		p.fw = len(p.srcRanges) > 0
	}
	return p, true
}

// sticky reports whether the port is a shared-mode port with ClientIP affinity.
func (p *portPlan) sticky() bool { return p.shared && p.sp.AffinityTimeout > 0 }

// hasInternal reports whether ClusterIP traffic has endpoints to go to.
func (p *portPlan) hasInternal() bool {
	if p.sp.InternalTrafficLocal {
		return p.local
	}
	return p.cat.HasAny
}

func (p *portPlan) internalChain() string {
	if p.sp.InternalTrafficLocal {
		return LocalChain(p.sp.Name)
	}
	return ServiceChain(p.sp.Name)
}

func (b *Builder) servicePort(f *fragment.Fragment, node *model.Node, sp *model.ServicePort) {
	p, ok := b.planPort(node, sp)
	if !ok {
		return
	}
	f.Elements = slices.Grow(f.Elements, b.elementCount(p))
	for _, a := range p.cips {
		f.Elements = append(f.Elements, nft.Element{Set: SetClusterIPs, Key: []nft.Value{nft.Addr(a)}})
	}
	b.dispatch(f, p)
	if !p.cat.HasAny {
		return
	}
	if !p.shared {
		if p.cluster {
			b.endpointChain(f, p, ServiceChain(sp.Name), p.cat.Cluster)
		}
		if p.local {
			b.endpointChain(f, p, LocalChain(sp.Name), p.cat.Local)
		}
		if p.ext {
			f.Chains = append(f.Chains, fragment.ChainDef{Chain: nft.Chain{Name: ExternalChain(sp.Name)}, Rules: withChain(ExternalChain(sp.Name), b.externalRules(p))})
		}
	}
	if p.sticky() {
		b.sticky(f, p)
	}
	if p.fw {
		b.firewall(f, node, p, b.externalTarget(f, p, p.addressKind()))
	}
	b.hairpin(f, p)
}

// hairpin adds "endpoint . endpoint" for every endpoint the port may pick, once each.
func (b *Builder) hairpin(f *fragment.Fragment, p *portPlan) {
	as := make([]netip.Addr, 0, len(p.cat.Cluster)+len(p.cat.Local))
	for _, eps := range [][]model.Endpoint{p.cat.Cluster, p.cat.Local} {
		for _, ep := range eps {
			as = append(as, ep.Addr)
		}
	}
	slices.SortFunc(as, netip.Addr.Compare)
	as = slices.Compact(as)
	keys := b.values(2 * len(as))
	f.Elements = slices.Grow(f.Elements, len(as))
	for i, a := range as {
		keys = append(keys, nft.Addr(a), nft.Addr(a))
		f.Elements = append(f.Elements, nft.Element{Set: SetHairpin, Key: keys[2*i : 2*i+2 : 2*i+2]})
	}
}

// elementCount is about how many elements the port adds: cluster-ips, dispatch, slots and
// hairpin. A full sync builds every Service's fragment: growing the slice element by element
// was a large part of its garbage.
func (b *Builder) elementCount(p *portPlan) int {
	eps := len(p.cat.Cluster) + len(p.cat.Local)
	external := len(p.lbIPs) + len(p.extIPs)
	if b.nodePorts(p.sp) {
		external++
	}
	n := 2*len(p.cips) + external + eps
	if p.shared {
		n += len(p.cips)*max(len(p.cat.Cluster), len(p.cat.Local)) + external*eps
	}
	return n
}

// internalTarget is the chain a ClusterIP a of the port goes to (its slots put in place in
// shared mode).
func (b *Builder) internalTarget(f *fragment.Fragment, p *portPlan, a netip.Addr) string {
	if p.shared {
		return b.sharedInternal(f, p, a)
	}
	return p.internalChain()
}

// externalTarget is the chain the port's external frontends of kind k go to (behind the fw-
// chain for LoadBalancer IPs with source ranges).
func (b *Builder) externalTarget(f *fragment.Fragment, p *portPlan, k frontendKind) string {
	if p.shared {
		return b.sharedExternalChain(f, p, k)
	}
	return ExternalChain(p.sp.Name)
}

// external is externalTarget for one frontend, whose slots it puts in place in shared mode.
func (b *Builder) external(f *fragment.Fragment, p *portPlan, k frontendKind, front []nft.Value) string {
	if p.shared {
		b.externalSlots(f, p, k, front)
	}
	return b.externalTarget(f, p, k)
}

// dispatch adds the port's keys to the dispatch maps, or, without endpoints, to the
// no-endpoint maps: reject when no endpoint exists anywhere, drop for ClusterIP traffic under
// internalTrafficPolicy Local without a local endpoint. Each dispatch element carries the
// Service port's name as its comment.
func (b *Builder) dispatch(f *fragment.Fragment, p *portPlan) {
	sp := p.sp
	dispatchMap, noEndpointMap := MapServiceIPs, MapNoEndpointServices
	switch {
	case sp.AllPorts:
		dispatchMap, noEndpointMap = MapServiceAllPorts, MapNoEndpointAllPorts
	case sp.IsRange():
		dispatchMap = MapServiceRanges
	}
	reject := &nft.Verdict{Kind: nft.VerdictGoto, Chain: ChainReject}
	add := func(a netip.Addr, v *nft.Verdict, ok bool) {
		key, end := portKey(a, p.proto, sp)
		set := dispatchMap
		if !ok {
			set = noEndpointMap
			if set == MapNoEndpointServices && end == nil {
				end = key // the no-endpoint map is an interval map: a single port is a one-port interval
			}
		}
		f.Elements = append(f.Elements, nft.Element{Set: set, Key: key, KeyEnd: end, Verdict: v, Comment: comment(p.name, "")})
	}
	for _, a := range p.cips {
		switch {
		case p.hasInternal():
			add(a, goToV(b.internalTarget(f, p, a)), true)
		case p.cat.HasAny:
			add(a, &nft.Verdict{Kind: nft.VerdictDrop}, false)
		default:
			add(a, reject, false)
		}
	}
	for i, as := range [][]netip.Addr{p.lbIPs, p.extIPs} {
		lb := i == 0
		for _, a := range as {
			switch {
			case !p.ext:
				add(a, reject, false)
			case lb && p.fw:
				b.external(f, p, p.addressKind(), addressKey(a, p))
				add(a, goToV(FirewallChain(sp.Name)), true)
			default:
				add(a, goToV(b.external(f, p, p.addressKind(), addressKey(a, p))), true)
			}
		}
	}
	if b.nodePorts(sp) {
		end := sp.NodePortEnd
		if end < sp.NodePort {
			end = sp.NodePort
		}
		key, keyEnd := []nft.Value{nft.Proto(p.proto), nft.Port(sp.NodePort)}, []nft.Value{nft.Proto(p.proto), nft.Port(end)}
		npMap, v := MapNoEndpointNodePorts, reject
		switch {
		case !p.ext:
		case end > sp.NodePort:
			npMap, v = MapNodePortRanges, goToV(b.external(f, p, p.nodePortKind(), nodePortKey(p)))
		default: // a single node port: the hash map
			npMap, v, keyEnd = MapNodePorts, goToV(b.external(f, p, p.nodePortKind(), nodePortKey(p))), nil
		}
		f.Elements = append(f.Elements, nft.Element{Set: npMap, Key: key, KeyEnd: keyEnd, Verdict: v, Comment: comment(p.name, "")})
	}
}

func goToV(chain string) *nft.Verdict { return &nft.Verdict{Kind: nft.VerdictGoto, Chain: chain} }

// nodePorts reports whether the port has node ports to program: all-ports Services never do,
// even when the API server allocated some.
func (b *Builder) nodePorts(sp *model.ServicePort) bool {
	return sp.NodePort != 0 && !sp.AllPorts
}

// externalRules is the ext- chain: traffic that entered through a node port, a LoadBalancer IP
// or an external IP. externalTrafficPolicy Cluster masquerades it and spreads it over the
// cluster. Local keeps the client's address and sends it to this node's endpoints (none: the
// drop bit), except for traffic from pods and from the node itself, which goes to the whole
// cluster as if it had gone out to a load balancer and come back (KEP-3866 short-circuit).
func (b *Builder) externalRules(p *portPlan) []nft.Rule {
	svc, name := ServiceChain(p.sp.Name), p.name
	if !p.sp.ExternalTrafficLocal {
		return []nft.Rule{
			rule(comment(name, ": masquerade traffic from outside the cluster"), nft.MarkOr{Bits: b.cfg.MasqueradeMark}),
			rule("", goTo(svc)),
		}
	}
	var rs []nft.Rule
	for _, c := range b.cfg.prefixesOfFamily(b.cfg.ClusterCIDRs) {
		rs = append(rs, rule(comment(name, ": short-circuit pod traffic"), nft.CmpPrefix{Field: nft.FieldSaddr, Prefix: c}, goTo(svc)))
	}
	rs = append(rs, rule(comment(name, ": short-circuit the node's own traffic, masqueraded"),
		nft.FibAddrType{}, nft.MarkOr{Bits: b.cfg.MasqueradeMark}, goTo(svc)))
	if p.local {
		return append(rs, rule(comment(name, ": external traffic to this node's endpoints"), goTo(LocalChain(p.sp.Name))))
	}
	return append(rs, rule(comment(name, ": no endpoint on this node: drop external traffic"), nft.MarkOr{Bits: b.cfg.DropMark}))
}
