package model

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
)

// claimKey is where a port lives: an IP and protocol, or (invalid addr) the node ports of a
// protocol, which are shared by every node address.
type claimKey struct {
	addr  netip.Addr
	proto Protocol
}

func (k claimKey) String() string {
	if !k.addr.IsValid() {
		return fmt.Sprintf("%s node ports", k.proto)
	}
	return fmt.Sprintf("%s on %s", k.proto, k.addr)
}

// claim is an interval of ports a Service uses at one claimKey.
type claim struct {
	key    claimKey
	lo, hi uint16 // lo <= hi, as the spec and the range annotations' parser ensure
	port   string // ServicePort name, for messages
	// via says how a node-port claim arises when it is not a node port itself: a LoadBalancer
	// or external IP that is a node address, or the health-check node port.
	via string
	// idx is the index of the ServicePort in Service.Ports; addr, when valid, is the address
	// that makes the claim (a cluster, external or LoadBalancer IP): a conflict over the claim
	// is settled by withholding that address from that ServicePort, and the rest of the
	// Service is served. A claim without addr (a node port, a health-check node port) cannot be
	// withheld that way and rejects the whole Service.
	idx  int
	addr netip.Addr
}

// site is one ServicePort on one address: what a conflict withholds.
type site struct {
	idx  int
	addr netip.Addr
}

func (c claim) site() (site, bool) { return site{c.idx, c.addr}, c.addr.IsValid() }

func (c claim) overlaps(o claim) bool { return c.key == o.key && c.lo <= o.hi && o.lo <= c.hi }

func (c claim) portsText() string {
	text := fmt.Sprintf("ports %d-%d", c.lo, c.hi)
	if c.lo == c.hi {
		text = fmt.Sprintf("port %d", c.lo)
	}
	if c.via != "" {
		text += " " + c.via
	}
	return text
}

// claimsOf lists the intervals an accepted Service uses; rejected and nil Services claim none.
// A node address serves the node ports, so a LoadBalancer or external IP that is a node address
// also claims its port among the node ports: it would shadow a node port or a health-check node
// port of the same number (the guard has already refused ranges and all-ports there).
func claimsOf(s *Service, node NodeAddresses) []claim {
	if s == nil || s.Rejected != nil {
		return nil
	}
	var out []claim
	for i := range s.Ports {
		p := &s.Ports[i]
		lo, hi := p.Port, p.PortEnd
		if p.AllPorts {
			lo, hi = 1, 65535
		}
		for _, ips := range [][]netip.Addr{p.ClusterIPs, p.ExternalIPs, p.LoadBalancerIPs} {
			for _, a := range ips {
				out = append(out, claim{key: claimKey{a, p.Name.Protocol}, lo: lo, hi: hi, port: p.Name.Port, idx: i, addr: a})
			}
		}
		nodePorts := claimKey{netip.Addr{}, p.Name.Protocol}
		if p.NodePort != 0 {
			out = append(out, claim{key: nodePorts, lo: p.NodePort, hi: p.NodePortEnd, port: p.Name.Port, idx: i})
		}
		if !p.AllPorts {
			for _, ips := range [][]netip.Addr{p.ExternalIPs, p.LoadBalancerIPs} {
				for _, a := range ips {
					if node[a] != 0 {
						out = append(out, claim{key: nodePorts, lo: lo, hi: hi, port: p.Name.Port,
							via: "on node address " + a.String(), idx: i, addr: a})
					}
				}
			}
		}
		if hc := p.HealthCheckNodePort; hc != 0 {
			out = append(out, claim{key: claimKey{netip.Addr{}, TCP}, lo: hc, hi: hc, port: p.Name.Port,
				via: "(health-check node port)", idx: i})
		}
	}
	return out
}

// claimIndex finds, for a claim, the Services whose claims overlap it.
type claimIndex map[claimKey]*claimants

// claimants are the Services claiming ports at one key. Most keys (a Service's own cluster IP)
// have one; the node ports of a protocol have thousands. The first few are kept in a slice and
// scanned: a map per key would cost more than the claims it holds (bench/README.md, "Sizes the
// code's layout rests on"). Once more claim the
// key, their claims are indexed by port (manyClaimants).
type claimants struct {
	few  []serviceClaims // while at most fewClaimants Services claim the key
	many *manyClaimants  // once more do
}

type serviceClaims struct {
	svc    ServiceKey
	claims []claim
}

const fewClaimants = 4

// manyClaimants are the claims at a key with more than fewClaimants Services, indexed by port so
// that a lookup costs what it finds: scanning them all made every node-port Service's upsert
// cost the number of node-port Services, and loading a cluster cost their square.
type manyClaimants struct {
	claims map[ServiceKey][]claim
	// byPort holds, at each port, a Service with a narrow claim covering it, and shared the
	// others at a port more Services claim (a conflict, rare): each Service once per port.
	// Apart, they take 40 bytes a port rather than 64.
	byPort map[uint16]ServiceKey
	shared map[uint16][]ServiceKey
	// wide holds the Services with a claim of more than narrowPorts ports (a node-port block):
	// rare, so every lookup scans them rather than each such claim taking an entry per port.
	wide keySet
}

// narrowPorts is the most ports a claim indexed port by port covers.
const narrowPorts = 16

func (c claim) narrow() bool { return int(c.hi)-int(c.lo) < narrowPorts }

// add lists claims, svc's claims at the key, after those listed already.
func (cl *claimants) add(svc ServiceKey, claims []claim) {
	if cl.many != nil {
		cl.many.add(svc, claims)
		return
	}
	for i := range cl.few {
		if cl.few[i].svc == svc {
			cl.few[i].claims = append(slices.Clip(cl.few[i].claims), claims...)
			return
		}
	}
	if len(cl.few) < fewClaimants {
		cl.few = append(cl.few, serviceClaims{svc, claims})
		return
	}
	cl.many = &manyClaimants{
		claims: make(map[ServiceKey][]claim, len(cl.few)+1),
		byPort: map[uint16]ServiceKey{},
	}
	for _, sc := range cl.few {
		cl.many.add(sc.svc, sc.claims)
	}
	cl.few = nil
	cl.many.add(svc, claims)
}

// remove drops every claim of svc and reports whether no Service is left.
func (cl *claimants) remove(svc ServiceKey) bool {
	if cl.many != nil {
		cl.many.remove(svc)
		return len(cl.many.claims) == 0
	}
	for i := range cl.few {
		if cl.few[i].svc == svc {
			cl.few = append(cl.few[:i], cl.few[i+1:]...)
			break
		}
	}
	return len(cl.few) == 0
}

// overlapping calls fn once for every Service with a claim overlapping c, with the first such
// claim in its list.
func (cl *claimants) overlapping(c claim, fn func(ServiceKey, claim)) {
	if cl == nil {
		return
	}
	if cl.many != nil {
		cl.many.overlapping(c, fn)
		return
	}
	for _, sc := range cl.few {
		if t, ok := c.firstOverlap(sc.claims); ok {
			fn(sc.svc, t)
		}
	}
}

// firstOverlap returns the first of claims that overlaps c.
func (c claim) firstOverlap(claims []claim) (claim, bool) {
	for _, t := range claims {
		if c.overlaps(t) {
			return t, true
		}
	}
	return claim{}, false
}

// add lists claims after svc's and indexes each at its ports, or among the wide ones.
func (m *manyClaimants) add(svc ServiceKey, claims []claim) {
	if have, ok := m.claims[svc]; ok {
		m.claims[svc] = append(slices.Clip(have), claims...) // never into the Service's own list
	} else {
		m.claims[svc] = claims
	}
	for _, c := range claims {
		if !c.narrow() {
			m.wide.add(svc)
			continue
		}
		for p := c.lo; ; p++ {
			switch first, ok := m.byPort[p]; {
			case !ok:
				m.byPort[p] = svc
			case first != svc && !slices.Contains(m.shared[p], svc):
				if m.shared == nil {
					m.shared = map[uint16][]ServiceKey{}
				}
				m.shared[p] = append(m.shared[p], svc)
			}
			if p == c.hi {
				break
			}
		}
	}
}

// remove drops svc's claims and their ports: it costs the ports svc claims at the key.
func (m *manyClaimants) remove(svc ServiceKey) {
	claims, ok := m.claims[svc]
	if !ok {
		return
	}
	delete(m.claims, svc)
	for _, c := range claims {
		if !c.narrow() {
			m.wide.remove(svc)
			continue
		}
		for p := c.lo; ; p++ {
			m.removeAt(p, svc)
			if p == c.hi {
				break
			}
		}
	}
}

// removeAt drops svc from the Services at port p, if it is there.
func (m *manyClaimants) removeAt(p uint16, svc ServiceKey) {
	first, ok := m.byPort[p]
	if !ok {
		return
	}
	more := m.shared[p]
	if i := slices.Index(more, svc); i >= 0 {
		more = slices.Delete(more, i, i+1)
	} else if first != svc {
		return
	} else if n := len(more); n > 0 {
		m.byPort[p], more = more[n-1], more[:n-1]
	} else {
		delete(m.byPort, p)
		return
	}
	if len(more) == 0 {
		delete(m.shared, p)
	} else {
		m.shared[p] = more
	}
}

// overlapping finds a Service through its first claim overlapping c: a narrow one at the first
// port it shares with c, a wide one among the wide Services. The ports of c are looked up one by
// one, or, when c covers more ports than are claimed, the claimed ports are scanned.
func (m *manyClaimants) overlapping(c claim, fn func(ServiceKey, claim)) {
	found := func(svc ServiceKey, p uint16) {
		t, ok := c.firstOverlap(m.claims[svc])
		if ok && t.narrow() && p == max(c.lo, t.lo) {
			fn(svc, t)
		}
	}
	at := func(p uint16, first ServiceKey) {
		found(first, p)
		for _, svc := range m.shared[p] {
			found(svc, p)
		}
	}
	if int(c.hi)-int(c.lo) < len(m.byPort) {
		for p := c.lo; ; p++ {
			if first, ok := m.byPort[p]; ok {
				at(p, first)
			}
			if p == c.hi {
				break
			}
		}
	} else {
		for p, first := range m.byPort {
			if c.lo <= p && p <= c.hi {
				at(p, first)
			}
		}
	}
	m.wide.each(func(svc ServiceKey) {
		if t, ok := c.firstOverlap(m.claims[svc]); ok && !t.narrow() {
			fn(svc, t)
		}
	})
}

// add indexes claims, svc's claims, which must not be modified afterwards: where the claims at
// one key are consecutive in the list, the most common case by far (one claim at the key), the
// index holds that part of the list itself rather than a copy.
func (ix claimIndex) add(svc ServiceKey, claims []claim) {
	for i, c := range claims {
		if slices.ContainsFunc(claims[:i], func(o claim) bool { return o.key == c.key }) {
			continue // added with the first claim at the key
		}
		j := i + 1
		for j < len(claims) && claims[j].key == c.key {
			j++
		}
		at := claims[i:j:j]
		if slices.ContainsFunc(claims[j:], func(o claim) bool { return o.key == c.key }) {
			at = slices.Clone(at)
			for _, o := range claims[j:] {
				if o.key == c.key {
					at = append(at, o)
				}
			}
		}
		cl := ix[c.key]
		if cl == nil {
			cl = &claimants{}
			ix[c.key] = cl
		}
		cl.add(svc, at)
	}
}

func (ix claimIndex) remove(svc ServiceKey, claims []claim) {
	for _, c := range claims {
		if cl := ix[c.key]; cl != nil && cl.remove(svc) {
			delete(ix, c.key)
		}
	}
}

// overlapping calls visit for every other Service with a claim overlapping one of claims (once
// per claim it overlaps).
func (ix claimIndex) overlapping(self ServiceKey, claims []claim, visit func(ServiceKey)) {
	for _, c := range claims {
		ix[c.key].overlapping(c, func(other ServiceKey, _ claim) {
			if other != self {
				visit(other)
			}
		})
	}
}

// ranked is one Service in a conflict component, ordered by age.
type ranked struct {
	key     ServiceKey
	created time.Time
	base    *Service
	claims  []claim
}

func olderFirst(rs []ranked) {
	sort.Slice(rs, func(i, j int) bool {
		if !rs[i].created.Equal(rs[j].created) {
			return rs[i].created.Before(rs[j].created)
		}
		return rs[i].key.String() < rs[j].key.String()
	})
}

// lost is one claim a Service lost to an older one: the winner and the winner's claim, for
// the message.
type lost struct {
	claim  claim
	winner ServiceKey
	theirs claim
}

func (l lost) text() string {
	return fmt.Sprintf("port %q (%s, %s) overlaps port %q (%s) of service %s, which is older and keeps them",
		l.claim.port, l.claim.key, l.claim.portsText(), l.theirs.port, l.theirs.portsText(), l.winner)
}

// resolved is the outcome of conflict resolution for one Service: its final model, and the
// claims it lost (nil when none), kept so that an endpoint change can settle the new model the
// same way without searching its neighbours again.
type resolved struct {
	final *Service
	lost  []lost
}

// resolveConflicts decides, oldest first, which Services of a component keep their ports: a
// Service whose claim overlaps one of an already accepted Service loses it, naming the older
// one (see settle for what losing means).
func resolveConflicts(rs []ranked) map[ServiceKey]resolved {
	olderFirst(rs)
	out := make(map[ServiceKey]resolved, len(rs))
	accepted := claimIndex{}
	for _, r := range rs {
		ls := conflicts(r, accepted)
		final := settle(r.base, ls)
		out[r.key] = resolved{final: final, lost: ls}
		if final.Rejected == nil {
			accepted.add(r.key, kept(r.claims, ls))
		}
	}
	return out
}

// conflicts lists the claims of r that overlap claims of accepted Services, each with the
// winner whatever the map order (the smallest key). A claim that cannot be withheld ends the
// list: the whole Service is rejected for it.
func conflicts(r ranked, accepted claimIndex) []lost {
	var out []lost
	for _, c := range r.claims {
		var winner *ServiceKey
		var theirs claim
		accepted[c.key].overlapping(c, func(other ServiceKey, t claim) {
			if winner == nil || other.String() < winner.String() {
				o := other
				winner, theirs = &o, t
			}
		})
		if winner == nil {
			continue
		}
		out = append(out, lost{claim: c, winner: *winner, theirs: theirs})
		if _, ok := c.site(); !ok {
			return out
		}
	}
	return out
}

// kept returns the claims that remain once the sites of ls are withheld.
func kept(claims []claim, ls []lost) []claim {
	if len(ls) == 0 {
		return claims
	}
	gone := map[site]bool{}
	for _, l := range ls {
		if st, ok := l.claim.site(); ok {
			gone[st] = true
		}
	}
	var out []claim
	for _, c := range claims {
		if st, ok := c.site(); !ok || !gone[st] {
			out = append(out, c)
		}
	}
	return out
}

// settle builds the final model of base from the claims it lost. None: base itself. A lost
// node port or health-check node port (which the API server and manifest mode's assigner never
// give twice): the whole Service is rejected, ServiceConflict. Otherwise only the lost sites are
// withheld: each losing ServicePort is not programmed on the contested address, its other
// addresses and the Service's other ports are served, and Withheld says what is missing (a
// ServicePort left without any address or node port is dropped). A Service left with nothing
// is rejected as a whole.
func settle(base *Service, ls []lost) *Service {
	if len(ls) == 0 || base == nil || base.Rejected != nil {
		return base
	}
	texts := make([]string, 0, len(ls))
	gone := map[site]bool{}
	whole := false
	for _, l := range ls {
		st, ok := l.claim.site()
		whole = whole || !ok
		if ok && gone[st] {
			continue
		}
		gone[st] = ok
		texts = append(texts, l.text())
	}
	msg := strings.Join(texts, "; ")
	if whole {
		return &Service{Key: base.Key, Rejected: reject(base.Key, ReasonServiceConflict,
			"%s; change the IPs or ports of one of the two", msg)}
	}
	out := &Service{Key: base.Key}
	for i := range base.Ports {
		p := base.Ports[i]
		drop := func(ips []netip.Addr) []netip.Addr {
			var keep []netip.Addr
			for _, a := range ips {
				if !gone[site{i, a}] {
					keep = append(keep, a)
				}
			}
			return keep
		}
		p.ClusterIPs, p.ExternalIPs, p.LoadBalancerIPs = drop(p.ClusterIPs), drop(p.ExternalIPs), drop(p.LoadBalancerIPs)
		if len(p.ClusterIPs)+len(p.ExternalIPs)+len(p.LoadBalancerIPs) == 0 && p.NodePort == 0 {
			continue
		}
		out.Ports = append(out.Ports, p)
	}
	if len(out.Ports) == 0 {
		return &Service{Key: base.Key, Rejected: reject(base.Key, ReasonServiceConflict,
			"%s; nothing of the Service is left to program, so change the IPs or ports of one of the two", msg)}
	}
	w := reject(base.Key, ReasonServiceConflict,
		"%s; only that is not programmed (the rest of the Service is served), so change the IPs or ports of one of the two", msg)
	w.Partial = true
	out.Withheld = w
	return out
}
