package ruleset

import (
	"net/netip"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// Builder builds fragments for one family. It holds only its Config: every method is a pure
// function of its arguments.
type Builder struct {
	cfg Config
	sc  scratch // ServiceScratch's reused memory
}

// NewBuilder validates cfg and returns a Builder for its family.
func NewBuilder(cfg Config) (*Builder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Builder{cfg: cfg}, nil
}

// Table is the table this builder's objects belong to.
func (b *Builder) Table() nft.Table { return b.cfg.table() }

// Family is the builder's IP family.
func (b *Builder) Family() nft.Family { return b.cfg.Family }

type baseChain struct {
	name     string
	typ      nft.ChainType
	hook     nft.Hook
	priority int32
}

// baseChains lists the hooks nftproxy attaches to, at the priorities named in names.go.
var baseChains = []baseChain{
	{ChainNATPrerouting, nft.ChainTypeNAT, nft.HookPrerouting, PriorityDNAT},
	{ChainNATOutput, nft.ChainTypeNAT, nft.HookOutput, PriorityDNAT},
	{ChainNATPostrouting, nft.ChainTypeNAT, nft.HookPostrouting, PrioritySNAT},
	{ChainFilterPrerouting, nft.ChainTypeFilter, nft.HookPrerouting, PriorityBeforeDNAT},
	{ChainFilterInput, nft.ChainTypeFilter, nft.HookInput, PriorityBeforeDNAT},
	{ChainFilterForward, nft.ChainTypeFilter, nft.HookForward, PriorityBeforeDNAT},
	{ChainFilterOutput, nft.ChainTypeFilter, nft.HookOutput, PriorityBeforeDNAT},
	{ChainFilterOutputDNATd, nft.ChainTypeFilter, nft.HookOutput, PriorityAfterDNAT},
}

func rule(comment string, exprs ...nft.Expr) nft.Rule {
	return nft.Rule{Exprs: exprs, Comment: comment}
}

func jump(chain string) nft.Verdict { return nft.Verdict{Kind: nft.VerdictJump, Chain: chain} }
func goTo(chain string) nft.Verdict { return nft.Verdict{Kind: nft.VerdictGoto, Chain: chain} }
func ctNew() nft.CtState            { return nft.CtState{Mask: nft.CtStateNew} }
func markSet(m uint32) nft.MarkTest { return nft.MarkTest{Mask: m, NonZero: true} }
func protoCmp(p uint8) nft.Cmp      { return nft.Cmp{Field: nft.FieldL4Proto, Value: nft.Proto(p)} }
func daddrIn(set string) nft.CmpSet { return nft.CmpSet{Fields: []nft.Field{nft.FieldDaddr}, Set: set} }
func addrProtoPort() []nft.Field {
	return []nft.Field{nft.FieldDaddr, nft.FieldL4Proto, nft.FieldDport}
}
func addrProto() []nft.Field                { return []nft.Field{nft.FieldDaddr, nft.FieldL4Proto} }
func protoPort() []nft.Field                { return []nft.Field{nft.FieldL4Proto, nft.FieldDport} }
func vmap(m string, f []nft.Field) nft.VMap { return nft.VMap{Fields: f, Map: m} }

// Base returns the fixed layout: base chains, shared chains, shared sets and maps, and the
// node-port addresses taken from node.
func (b *Builder) Base(node *model.Node) fragment.Fragment {
	c := &b.cfg
	addr := c.Family.AddrType()
	verdictMap := func(name, comment string, interval bool, key ...nft.Type) nft.Set {
		return nft.Set{Name: name, Key: key, Data: []nft.Type{nft.TypeVerdict}, Interval: interval, Comment: comment}
	}
	// An endpoint map's key ends with the random slot; NumgenKey 1 only lets nft describe it
	// ("numgen random mod 1": the modulus of a typeof is a description, each pick-N chain
	// draws its own). Comments stay short: the kernel refuses set userdata (typeof and
	// comment together) over 256 bytes.
	endpointMap := func(name, comment string, key ...nft.Type) nft.Set {
		return nft.Set{Name: name, Key: append(key, nft.TypeInteger), Data: []nft.Type{addr, nft.TypeInetService}, NumgenKey: 1, Comment: comment}
	}
	var f fragment.Fragment
	f.Sets = []nft.Set{
		{Name: SetClusterIPs, Key: []nft.Type{addr}, Comment: "ClusterIPs of programmed Services"},
		{Name: SetNodePortIPs, Key: []nft.Type{addr}, Comment: "node addresses that accept node ports"},
		{Name: SetHairpin, Key: []nft.Type{addr, addr}, Comment: "endpoint . endpoint: a pod reaching itself through a Service"},
		verdictMap(MapServiceIPs, "ClusterIP, LoadBalancer IP or external IP . protocol . port -> Service", false, addr, nft.TypeInetProto, nft.TypeInetService),
		verdictMap(MapServiceRanges, "Service address . protocol . port range -> Service", true, addr, nft.TypeInetProto, nft.TypeInetService),
		verdictMap(MapServiceAllPorts, "all-ports Service address . protocol -> Service", false, addr, nft.TypeInetProto),
		verdictMap(MapNodePorts, "protocol . node port -> Service", false, nft.TypeInetProto, nft.TypeInetService),
		verdictMap(MapNodePortRanges, "protocol . node-port block -> Service", true, nft.TypeInetProto, nft.TypeInetService),
		verdictMap(MapNoEndpointServices, "Services without endpoints: reject", true, addr, nft.TypeInetProto, nft.TypeInetService),
		verdictMap(MapNoEndpointAllPorts, "all-ports Services without endpoints: reject", false, addr, nft.TypeInetProto),
		verdictMap(MapNoEndpointNodePorts, "node ports of Services without endpoints: reject", true, nft.TypeInetProto, nft.TypeInetService),
	}
	// Each endpoint map is split into shards (shared.go, endpointShard).
	for s := 0; s < c.endpointShards(); s++ {
		f.Sets = append(f.Sets,
			endpointMap(EndpointMap(MapEndpoints, s), "address . protocol . port . slot -> endpoint", addr, nft.TypeInetProto, nft.TypeInetService),
			endpointMap(EndpointMap(MapLocalEndpoints, s), "address . protocol . port . slot -> local endpoint", addr, nft.TypeInetProto, nft.TypeInetService),
			endpointMap(EndpointMap(MapNodePortEndpoints, s), "protocol . node port . slot -> endpoint", nft.TypeInetProto, nft.TypeInetService),
			endpointMap(EndpointMap(MapLocalNodePortEndpoints, s), "protocol . node port . slot -> local endpoint", nft.TypeInetProto, nft.TypeInetService))
	}
	if c.Family == nft.IPv4 {
		// Dynamic: the packet path owns their elements (the reconciler never diffs them). No
		// default timeout: every update says its Service's.
		key := []nft.Type{addr, addr, nft.TypeInetProto, nft.TypeInetService}
		f.Sets = append(f.Sets,
			nft.Set{Name: MapAffinity, Key: key, Data: []nft.Type{addr, nft.TypeInetService}, Dynamic: true, HasTimeout: true,
				Size: c.affinityMapSize(), Comment: "client . address . protocol . port -> endpoint (ClientIP affinity)"},
			nft.Set{Name: MapAffinityAddr, Key: key, Data: []nft.Type{addr}, Dynamic: true, HasTimeout: true,
				Size: c.affinityMapSize(), Comment: "client . address . protocol . port -> endpoint address (affinity, port kept)"},
			verdictMap(MapStickyFrontends, "sticky address . protocol . port -> record its endpoints", false, addr, nft.TypeInetProto, nft.TypeInetService),
			verdictMap(MapStickyNodePorts, "sticky protocol . node port -> record its endpoints", false, nft.TypeInetProto, nft.TypeInetService))
	}
	for _, a := range b.NodePortAddrs(node) {
		f.Elements = append(f.Elements, nft.Element{Set: SetNodePortIPs, Key: []nft.Value{nft.Addr(a)}})
	}
	if c.HealthCheckPort != 0 {
		f.Sets = append(f.Sets, nft.Set{Name: SetHealthCheckPorts, Key: []nft.Type{nft.TypeInetService},
			Comment: "health-check node ports of externalTrafficPolicy Local Services"})
	}

	rules := map[string][]nft.Rule{
		ChainNATPrerouting:  {rule("", jump(ChainServices))},
		ChainNATOutput:      {rule("", jump(ChainServices))},
		ChainNATPostrouting: {rule("", jump(ChainMasquerading))},
		// The endpoint checks of traffic arriving at the node run in prerouting, before any
		// table's DNAT: after it, another proxy's stale translation would hide the Service
		// address from them.
		ChainFilterPrerouting: {
			rule("", ctNew(), jump(ChainNodePortsCheck)),
			rule("", ctNew(), jump(ChainEndpointsCheck)),
		},
		ChainFilterInput: {
			rule("drop what nftproxy marked to drop", markSet(c.DropMark), nft.Verdict{Kind: nft.VerdictDrop}),
			rule("clear the masquerade mark on traffic delivered to the node", markSet(c.MasqueradeMark), nft.MarkXor{Bits: c.MasqueradeMark}),
		},
		ChainFilterForward: {
			rule("", ctNew(), jump(ChainClusterIPsCheck)),
			rule("drop what nftproxy marked to drop", markSet(c.DropMark), nft.Verdict{Kind: nft.VerdictDrop}),
		},
		// Traffic from the node to itself is refused here, never in filter-prerouting when it
		// comes back over loopback: kernels without a 2025 fix warn on a reject in prerouting of a
		// packet that already has a route.
		ChainFilterOutput: {
			rule("", ctNew(), jump(ChainNodePortsCheck)),
			rule("", ctNew(), jump(ChainEndpointsCheck)),
		},
		ChainFilterOutputDNATd: {
			rule("", ctNew(), jump(ChainClusterIPsCheck)),
			rule("drop what nftproxy marked to drop", markSet(c.DropMark), nft.Verdict{Kind: nft.VerdictDrop}),
		},
		ChainMasquerading: {
			rule("masquerade marked traffic, clearing the mark", markSet(c.MasqueradeMark), nft.MarkXor{Bits: c.MasqueradeMark}, nft.Masquerade{FullyRandom: true}),
			rule("hairpin: a pod that reached itself through a Service",
				nft.CtStatus{Mask: nft.CtStatusDNAT}, nft.CmpSet{Fields: []nft.Field{nft.FieldSaddr, nft.FieldDaddr}, Set: SetHairpin}, nft.Masquerade{FullyRandom: true}),
		},
		ChainServices: b.servicesRules(),
		ChainEndpointsCheck: {
			rule("Services without endpoints", vmap(MapNoEndpointServices, addrProtoPort())),
			rule("all-ports Services without endpoints", vmap(MapNoEndpointAllPorts, addrProto())),
		},
		ChainNodePortsCheck: {
			rule("node ports of Services without endpoints", daddrIn(SetNodePortIPs), vmap(MapNoEndpointNodePorts, protoPort())),
		},
		ChainClusterIPsCheck: b.clusterIPsCheckRules(),
		ChainReject: {
			rule("", protoCmp(unix.IPPROTO_TCP), nft.Reject{TCPReset: true}),
			rule("", nft.Reject{}),
		},
	}
	if c.HealthCheckPort != 0 {
		b.healthCheckRules(rules)
		f.Chains = append(f.Chains, fragment.ChainDef{Chain: nft.Chain{Name: ChainHealthChecks}, Rules: withChain(ChainHealthChecks, rules[ChainHealthChecks])})
	}
	if c.Family == nft.IPv4 {
		for _, bc := range []string{ChainFilterInput, ChainFilterForward, ChainFilterOutputDNATd} {
			rules[bc] = append(rules[bc], recordRules()...)
		}
		f.Chains = append(f.Chains, fragment.ChainDef{Chain: nft.Chain{Name: ChainAffinityHit}, Rules: withChain(ChainAffinityHit, []nft.Rule{
			rule("a known client: back to its endpoint", nft.DNATMap{Fields: affinityKey(), Map: MapAffinity, WithPort: true})})})
	}
	for _, bc := range baseChains {
		f.Chains = append(f.Chains, fragment.ChainDef{
			Chain: nft.Chain{Name: bc.name, Base: &nft.BaseChain{Type: bc.typ, Hook: bc.hook, Priority: bc.priority, Policy: nft.PolicyAccept}},
			Rules: withChain(bc.name, rules[bc.name]),
		})
	}
	for _, name := range []string{ChainServices, ChainMasquerading, ChainEndpointsCheck, ChainNodePortsCheck, ChainClusterIPsCheck, ChainReject} {
		f.Chains = append(f.Chains, fragment.ChainDef{Chain: nft.Chain{Name: name}, Rules: withChain(name, rules[name])})
	}
	return f
}

// healthCheckRules send TCP to a node-port address on a health-check node port to nftproxy's
// listener, after the Services (a Service on a node address keeps its port there, as it did
// from a listener's socket). From outside (prerouting) only while no full socket of the node
// holds the port: kube-proxy's listener answers its own ports until it exits, and from then on
// the next connection is redirected, with no sync. At output the kernel's socket lookup finds
// the sending socket, so the node's own probes go to nftproxy whenever its set holds the port;
// the daemon empties the set when it stops (cmd/nftproxy/app).
func (b *Builder) healthCheckRules(rules map[string][]nft.Rule) {
	match := func() []nft.Expr {
		return []nft.Expr{daddrIn(SetNodePortIPs), protoCmp(unix.IPPROTO_TCP),
			nft.CmpSet{Fields: []nft.Field{nft.FieldDport}, Set: SetHealthCheckPorts}}
	}
	redirect := nft.Redirect{Port: b.cfg.HealthCheckPort}
	rules[ChainNATPrerouting] = append(rules[ChainNATPrerouting],
		rule("health-check node ports", append(match(), goTo(ChainHealthChecks))...))
	rules[ChainNATOutput] = append(rules[ChainNATOutput],
		rule("the node's own health checks: to nftproxy's listener", append(match(), redirect)...))
	const held = "another process holds this health-check node port: it answers"
	rules[ChainHealthChecks] = []nft.Rule{
		rule(held, nft.SocketMatch{Key: nft.SocketWildcard}, nft.Verdict{Kind: nft.VerdictReturn}),
		rule(held, nft.SocketMatch{Key: nft.SocketWildcard, Value: true}, nft.Verdict{Kind: nft.VerdictReturn}),
		rule("to nftproxy's health-check listener", protoCmp(unix.IPPROTO_TCP), redirect),
	}
}

// stickyProtocols are the protocols a Service port may have, each with its own recording rules.
var stickyProtocols = []uint8{unix.IPPROTO_TCP, unix.IPPROTO_UDP, unix.IPPROTO_SCTP}

// recordRules go last in the filter chains that see a packet after DNAT (forward, input, output
// after dstnat): a connection to a sticky frontend, looked up by its original tuple, jumps to
// the chain that records its endpoint. One rule per protocol and map: nft reads "ct original
// proto-dst" in a concatenation only after a protocol match. Node ports count only on the
// addresses that accept them. Only new connections are looked up: a packet of an established one
// costs a ct state test, not two map lookups.
func recordRules() []nft.Rule {
	var rs []nft.Rule
	for _, p := range stickyProtocols {
		rs = append(rs, rule("record endpoints of sticky Service addresses", ctNew(), protoCmp(p),
			vmap(MapStickyFrontends, []nft.Field{nft.FieldCtOrigDaddr, nft.FieldL4Proto, nft.FieldCtOrigProtoDst})))
	}
	for _, p := range stickyProtocols {
		rs = append(rs, rule("record endpoints of sticky node ports", ctNew(), protoCmp(p),
			nft.CmpSet{Fields: []nft.Field{nft.FieldCtOrigDaddr}, Set: SetNodePortIPs},
			vmap(MapStickyNodePorts, []nft.Field{nft.FieldL4Proto, nft.FieldCtOrigProtoDst})))
	}
	return rs
}

// servicesRules is the dispatch chain: exact ports, then ranges, then all-ports, then node
// ports; each a single map lookup whatever the number of Services.
func (b *Builder) servicesRules() []nft.Rule {
	var rs []nft.Rule
	switch cidrs := b.cfg.prefixesOfFamily(b.cfg.ClusterCIDRs); {
	case b.cfg.MasqueradeAll:
		rs = append(rs, rule("masquerade all traffic to ClusterIPs", daddrIn(SetClusterIPs), nft.MarkOr{Bits: b.cfg.MasqueradeMark}))
	case len(cidrs) > 0:
		ex := []nft.Expr{daddrIn(SetClusterIPs)}
		for _, p := range cidrs {
			ex = append(ex, nft.CmpPrefix{Field: nft.FieldSaddr, Neg: true, Prefix: p})
		}
		ex = append(ex, nft.MarkOr{Bits: b.cfg.MasqueradeMark})
		rs = append(rs, rule("masquerade traffic to ClusterIPs from outside the cluster", ex...))
	}
	rs = append(rs,
		rule("Service ports", vmap(MapServiceIPs, addrProtoPort())),
		rule("Service port ranges", vmap(MapServiceRanges, addrProtoPort())),
		rule("all-ports Services", vmap(MapServiceAllPorts, addrProto())),
		rule("node ports", daddrIn(SetNodePortIPs), vmap(MapNodePorts, protoPort())),
		rule("node-port blocks", daddrIn(SetNodePortIPs), vmap(MapNodePortRanges, protoPort())),
	)
	return rs
}

// clusterIPsCheckRules run after every table's DNAT (filter-forward, filter-output-post-dnat):
// a packet still addressed to a ClusterIP matched none of its ports, and one still addressed
// to an unallocated address of the service CIDR was translated by nobody. Deciding the drop
// here, not in nftproxy's NAT chain (which runs first), leaves another proxy's Services to it
// (kube-proxy's, side by side or during a migration).
func (b *Builder) clusterIPsCheckRules() []nft.Rule {
	rs := []nft.Rule{rule("reject traffic to undefined ports of ClusterIPs", daddrIn(SetClusterIPs), goTo(ChainReject))}
	for _, p := range b.cfg.prefixesOfFamily(b.cfg.ServiceCIDRs) {
		// An address the node itself holds is never dropped here, even inside the service
		// CIDR: the node's addresses stay the node's (start-up refuses such a CIDR; an address
		// gained later must still answer).
		rs = append(rs, rule("drop traffic to unallocated Service addresses",
			nft.CmpPrefix{Field: nft.FieldDaddr, Prefix: p},
			nft.CmpSet{Fields: []nft.Field{nft.FieldDaddr}, Set: SetClusterIPs, Neg: true},
			nft.FibAddrType{Daddr: true, Neg: true},
			nft.Verdict{Kind: nft.VerdictDrop}))
	}
	return rs
}

// NodePortAddrs are the node's addresses of this family that accept node ports: inside
// NodePortCIDRs when given, never loopback.
func (b *Builder) NodePortAddrs(node *model.Node) []netip.Addr {
	if node == nil {
		return nil
	}
	cidrs := b.cfg.prefixesOfFamily(b.cfg.NodePortCIDRs)
	var out []netip.Addr
	for _, a := range b.cfg.ofFamily(node.Addresses) {
		if a.IsLoopback() {
			continue
		}
		if len(cidrs) > 0 && !anyContains(cidrs, a) {
			continue
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return dedupAddrs(out)
}

func anyContains(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func dedupAddrs(s []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for i, a := range s {
		if i == 0 || a != s[i-1] {
			out = append(out, a)
		}
	}
	return out
}

func withChain(chain string, rs []nft.Rule) []nft.Rule {
	for i := range rs {
		rs[i].Chain = chain
	}
	return rs
}
