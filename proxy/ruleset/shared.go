package ruleset

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// Shared mode (README.md, "Shared-mode ports"): a single-port Service port without ClientIP
// affinity owns no chain and no set. Each of its frontends holds its endpoints as slots
// 0..N-1 in a map shared by every Service, keyed by what the packet itself carries (its
// destination address, protocol and port, or only protocol and port for a node port), and its
// dispatch element goes to a chain shared by every port with the same endpoint count. A new
// Service, an endpoint change or a Service removal is then element changes only, and the
// number of named sets does not grow with the number of Services.

// frontendKind is the class of a shared-mode port's frontends: its addresses (ClusterIP,
// LoadBalancer IP, external IP), keyed by "address . protocol . port . slot", or its node port,
// keyed by "protocol . port . slot" (any node address); and the endpoint-map shard its Service
// is in (README.md, "Endpoint map shards").
type frontendKind struct {
	nodePort bool
	shard    int
}

// endpointShard is the endpoint-map shard of a Service among n: a hash of its namespace and
// name, so every port and frontend of one Service is in one shard and its place never depends
// on other Services. Each endpoint map is split so because the kernel restarts a set's dump
// from its first element for every reply, so reading a map back costs the square of its size:
// split n ways, the read-back of the endpoints costs about 1/n as much (and a new pick chain
// binds, and so walks, an n-th of them). The number of named sets stays fixed (4 × n), whatever
// the number of Services.
func endpointShard(k model.ServiceKey, n int) int {
	h := fnv.New32a()
	h.Write([]byte(k.Namespace))
	h.Write([]byte{'/'})
	h.Write([]byte(k.Name))
	return int(h.Sum32() % uint32(n))
}

// EndpointMap is the name of shard s of the endpoint map m (MapEndpoints, MapLocalEndpoints,
// MapNodePortEndpoints or MapLocalNodePortEndpoints): "endpoints-s3".
func EndpointMap(m string, s int) string { return m + "-s" + strconv.Itoa(s) }

// IsEndpointMap reports whether set is a shard of the endpoint map m.
func IsEndpointMap(set, m string) bool {
	n, ok := strings.CutPrefix(set, m+"-s")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 16)
	return err == nil
}

// kinds are the address and node-port frontend kinds of the port's shard.
func (p *portPlan) addressKind() frontendKind  { return frontendKind{shard: p.shard} }
func (p *portPlan) nodePortKind() frontendKind { return frontendKind{nodePort: true, shard: p.shard} }

// infix is "" for addresses and "nodeport-" for node ports, as it appears in chain names.
func (k frontendKind) infix() string {
	if k.nodePort {
		return "nodeport-"
	}
	return ""
}

// endpointMap is the shared map holding the kind's slots: the cluster-wide list, or with local
// this node's endpoints of externalTrafficPolicy Local frontends.
func (k frontendKind) endpointMap(local bool) string {
	m := MapEndpoints
	switch {
	case k.nodePort && local:
		m = MapLocalNodePortEndpoints
	case k.nodePort:
		m = MapNodePortEndpoints
	case local:
		m = MapLocalEndpoints
	}
	return EndpointMap(m, k.shard)
}

// key lists the packet fields before the random slot in the kind's map key.
func (k frontendKind) key() []nft.Field {
	if k.nodePort {
		return nft.DNATNumgenKeyPort
	}
	return nft.DNATNumgenKeyAddr
}

// pickChain: "pick-3-s7" (3 endpoints, shard 7), "pick-local-nodeport-2-s0".
func (k frontendKind) pickChain(local bool, n int) string {
	l := ""
	if local {
		l = "local-"
	}
	return fmt.Sprintf("pick-%s%s%d-s%d", l, k.infix(), n, k.shard)
}

// masqPickChain: "masq-pick-3-s7", "masq-pick-nodeport-3-s7".
func (k frontendKind) masqPickChain(n int) string { return "masq-" + k.pickChain(false, n) }

// localOfChain: "local-1-of-3-s7", "local-nodeport-1-of-3-s7".
func (k frontendKind) localOfChain(m, n int) string {
	return fmt.Sprintf("local-%s%d-of-%d-s%d", k.infix(), m, n, k.shard)
}

// addChain adds a shared chain to f unless f already has it: several ports of one Service may
// need the same one, and every fragment that needs it declares it with the same rules (Merge
// keeps one copy, the reconciler counts its users).
func addChain(f *fragment.Fragment, name string, rules ...nft.Rule) {
	for i := range f.Chains {
		if f.Chains[i].Chain.Name == name {
			return
		}
	}
	f.Chains = append(f.Chains, fragment.ChainDef{Chain: nft.Chain{Name: name}, Rules: withChain(name, rules)})
}

// pick adds the pick chain of n slots and returns its name. Its one rule reads the map with
// the packet's own frontend, so it serves every port with n endpoints.
func (b *Builder) pick(f *fragment.Fragment, k frontendKind, local bool, n int) string {
	name := k.pickChain(local, n)
	addChain(f, name, rule("", nft.DNATNumgen{Modulus: uint32(n), Map: k.endpointMap(local), WithPort: true, Key: k.key()}))
	return name
}

// stickyPick is pick for a port with ClientIP affinity (sticky): a chain that sends a known
// client back to its endpoint through the shared hit chain, else goes on to the pick chain
// ("affinity-pick-3"). It names no map, and the endpoint is recorded after DNAT (recordRules),
// so the chain depends on neither the timeout nor the endpoints.
func (b *Builder) stickyPick(f *fragment.Fragment, k frontendKind, local bool, n int, sticky bool) string {
	pick := b.pick(f, k, local, n)
	if !sticky {
		return pick
	}
	name := stickyName(pick, true)
	addChain(f, name, rule("a known client: back to its endpoint", jump(ChainAffinityHit)), rule("", goTo(pick)))
	return name
}

// stickyName is the name of the sticky variant of a shared chain: "affinity-masq-pick-3".
func stickyName(chain string, sticky bool) string {
	if sticky {
		return "affinity-" + chain
	}
	return chain
}

// masqPick adds the chain of external traffic under externalTrafficPolicy Cluster (masquerade
// mark, then the pick chain of n) and returns its name. It names no map: creating it never makes
// the kernel walk a map's elements.
func (b *Builder) masqPick(f *fragment.Fragment, k frontendKind, n int, sticky bool) string {
	pick := b.stickyPick(f, k, false, n, sticky)
	name := stickyName(k.masqPickChain(n), sticky)
	addChain(f, name, rule("masquerade traffic from outside the cluster", nft.MarkOr{Bits: b.cfg.MasqueradeMark}, goTo(pick)))
	return name
}

// localOf adds the chain of external traffic under externalTrafficPolicy Local with m endpoints
// on this node and n in the cluster, and returns its name: pods and the node itself reach the
// whole cluster (KEP-3866 short-circuit, the node's traffic masqueraded), outside clients keep
// their address and reach this node's endpoints, or get the drop bit when it has none.
func (b *Builder) localOf(f *fragment.Fragment, k frontendKind, m, n int, sticky bool) string {
	pick := b.stickyPick(f, k, false, n, sticky)
	var local string
	if m > 0 {
		local = b.stickyPick(f, k, true, m, sticky)
	}
	var rs []nft.Rule
	for _, c := range b.cfg.prefixesOfFamily(b.cfg.ClusterCIDRs) {
		rs = append(rs, rule("short-circuit pod traffic", nft.CmpPrefix{Field: nft.FieldSaddr, Prefix: c}, goTo(pick)))
	}
	rs = append(rs, rule("short-circuit the node's own traffic, masqueraded",
		nft.FibAddrType{}, nft.MarkOr{Bits: b.cfg.MasqueradeMark}, goTo(pick)))
	if m > 0 {
		rs = append(rs, rule("external traffic to this node's endpoints", goTo(local)))
	} else {
		rs = append(rs, rule("no endpoint on this node: drop external traffic", nft.MarkOr{Bits: b.cfg.DropMark}))
	}
	name := stickyName(k.localOfChain(m, n), sticky)
	addChain(f, name, rs...)
	return name
}

// slots puts eps in the kind's (local) map as slots 0..len-1 under the frontend key front. The
// keys and data of one frontend share two backing arrays (a full sync builds millions of them).
func (b *Builder) slots(f *fragment.Fragment, k frontendKind, local bool, front []nft.Value, eps []model.Endpoint) {
	m := k.endpointMap(local)
	w := len(front) + 1
	keys, data := b.values(w*len(eps)), b.values(2*len(eps))
	f.Elements = slices.Grow(f.Elements, len(eps))
	for i, ep := range eps {
		keys = append(append(keys, front...), nft.Int(uint32(i)))
		data = append(data, nft.Addr(ep.Addr), nft.Port(ep.Port))
		f.Elements = append(f.Elements, nft.Element{Set: m, Key: keys[i*w : (i+1)*w : (i+1)*w], Data: data[2*i : 2*i+2 : 2*i+2]})
	}
}

// addressKey is the frontend key of an address: "addr . proto . port".
func addressKey(a netip.Addr, p *portPlan) []nft.Value {
	return []nft.Value{nft.Addr(a), nft.Proto(p.proto), nft.Port(p.sp.Port)}
}

// nodePortKey is the frontend key of the port's node port: "proto . port".
func nodePortKey(p *portPlan) []nft.Value {
	return []nft.Value{nft.Proto(p.proto), nft.Port(p.sp.NodePort)}
}

// sharedInternal puts a ClusterIP's slots in place and returns the chain it goes to: the
// cluster-wide endpoints, or this node's under internalTrafficPolicy Local.
func (b *Builder) sharedInternal(f *fragment.Fragment, p *portPlan, a netip.Addr) string {
	eps := p.cat.Cluster
	if p.sp.InternalTrafficLocal {
		eps = p.cat.Local
	}
	b.slots(f, p.addressKind(), false, addressKey(a, p), eps)
	return b.stickyPick(f, p.addressKind(), false, len(eps), p.sticky())
}

// sharedExternalChain adds the chains of the port's external frontends of kind k and returns
// the one their dispatch elements (or the fw- chain) go to: masquerade and spread under
// externalTrafficPolicy Cluster, the local-M-of-N choice under Local.
func (b *Builder) sharedExternalChain(f *fragment.Fragment, p *portPlan, k frontendKind) string {
	if !p.sp.ExternalTrafficLocal {
		return b.masqPick(f, k, len(p.cat.Cluster), p.sticky())
	}
	return b.localOf(f, k, len(p.cat.Local), len(p.cat.Cluster), p.sticky())
}

// externalSlots puts the slots of an external frontend of kind k in place (front is its key):
// the cluster-wide endpoints, and this node's too under externalTrafficPolicy Local.
func (b *Builder) externalSlots(f *fragment.Fragment, p *portPlan, k frontendKind, front []nft.Value) {
	b.slots(f, k, false, front, p.cat.Cluster)
	if p.sp.ExternalTrafficLocal {
		b.slots(f, k, true, front, p.cat.Local)
	}
}

// sticky adds what a shared-mode port with ClientIP affinity needs besides its slots (README.md,
// "sessionAffinity ClientIP"): each frontend with endpoints in the sticky-frontend maps, jumping
// to the chain that records its endpoint after DNAT, and that endpoint declared to the
// reconciler (no rule names it, and the prune must know it).
func (b *Builder) sticky(f *fragment.Fragment, p *portPlan) {
	rec := AffinityRecordChain(strings.ToLower(string(p.sp.Name.Protocol)), p.sp.AffinityTimeout)
	addChain(f, rec, rule("", ctNew(), protoCmp(p.proto), nft.SetUpdate{
		Fields: []nft.Field{nft.FieldSaddr, nft.FieldCtOrigDaddr, nft.FieldL4Proto, nft.FieldCtOrigProtoDst},
		Set:    MapAffinity, Timeout: p.sp.AffinityTimeout,
		DataFields: []nft.Field{nft.FieldCtReplySaddr, nft.FieldCtReplyProtoSrc}}))
	v := &nft.Verdict{Kind: nft.VerdictJump, Chain: rec}
	add := func(a netip.Addr) {
		f.Elements = append(f.Elements, nft.Element{Set: MapStickyFrontends, Key: addressKey(a, p), Verdict: v, Comment: comment(p.name, "")})
	}
	if p.hasInternal() {
		for _, a := range p.cips {
			add(a)
		}
	}
	if p.ext {
		for _, as := range [][]netip.Addr{p.lbIPs, p.extIPs} {
			for _, a := range as {
				add(a)
			}
		}
		if b.nodePorts(p.sp) {
			f.Elements = append(f.Elements, nft.Element{Set: MapStickyNodePorts, Key: nodePortKey(p), Verdict: v, Comment: comment(p.name, "")})
		}
	}
	seen := map[netip.AddrPort]bool{}
	for _, eps := range [][]model.Endpoint{p.cat.Cluster, p.cat.Local} {
		for _, ep := range eps {
			k := netip.AddrPortFrom(ep.Addr, ep.Port)
			if !seen[k] {
				seen[k] = true
				f.Recorded = append(f.Recorded, fragment.Recorded{Set: MapAffinity, Data: []nft.Value{nft.Addr(ep.Addr), nft.Port(ep.Port)}})
			}
		}
	}
}
