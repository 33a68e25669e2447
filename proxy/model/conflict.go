package model

import (
	"fmt"
	"net/netip"
	"sort"
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
	lo, hi uint16
	port   string // ServicePort name, for messages
	// via says how a node-port claim arises when it is not a node port itself: a LoadBalancer
	// or external IP that is a node address, or the health-check node port.
	via string
}

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
				out = append(out, claim{key: claimKey{a, p.Name.Protocol}, lo: lo, hi: hi, port: p.Name.Port})
			}
		}
		nodePorts := claimKey{netip.Addr{}, p.Name.Protocol}
		if p.NodePort != 0 {
			out = append(out, claim{key: nodePorts, lo: p.NodePort, hi: p.NodePortEnd, port: p.Name.Port})
		}
		if !p.AllPorts {
			for _, ips := range [][]netip.Addr{p.ExternalIPs, p.LoadBalancerIPs} {
				for _, a := range ips {
					if node[a] != 0 {
						out = append(out, claim{key: nodePorts, lo: lo, hi: hi, port: p.Name.Port, via: "on node address " + a.String()})
					}
				}
			}
		}
		if hc := p.HealthCheckNodePort; hc != 0 {
			out = append(out, claim{key: claimKey{netip.Addr{}, TCP}, lo: hc, hi: hc, port: p.Name.Port, via: "(health-check node port)"})
		}
	}
	return out
}

// claimIndex finds, for a claim, the Services whose claims overlap it.
type claimIndex map[claimKey]map[ServiceKey][]claim

func (ix claimIndex) add(svc ServiceKey, claims []claim) {
	for _, c := range claims {
		m := ix[c.key]
		if m == nil {
			m = map[ServiceKey][]claim{}
			ix[c.key] = m
		}
		m[svc] = append(m[svc], c)
	}
}

func (ix claimIndex) remove(svc ServiceKey, claims []claim) {
	for _, c := range claims {
		if m := ix[c.key]; m != nil {
			delete(m, svc)
			if len(m) == 0 {
				delete(ix, c.key)
			}
		}
	}
}

// overlapping calls visit for every other Service with a claim overlapping one of claims.
func (ix claimIndex) overlapping(self ServiceKey, claims []claim, visit func(ServiceKey)) {
	for _, c := range claims {
		for other, theirs := range ix[c.key] {
			if other == self {
				continue
			}
			for _, t := range theirs {
				if c.overlaps(t) {
					visit(other)
					break
				}
			}
		}
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

// resolveConflicts decides, oldest first, which Services of a component keep their ports: a
// Service whose claim overlaps one of an already accepted Service is rejected naming it. The
// result maps each Service to its final model.
func resolveConflicts(rs []ranked) map[ServiceKey]*Service {
	olderFirst(rs)
	out := make(map[ServiceKey]*Service, len(rs))
	accepted := claimIndex{}
	for _, r := range rs {
		if rej := firstConflict(r, accepted); rej != nil {
			out[r.key] = &Service{Key: r.key, Rejected: rej}
			continue
		}
		accepted.add(r.key, r.claims)
		out[r.key] = r.base
	}
	return out
}

func firstConflict(r ranked, accepted claimIndex) *Rejection {
	for _, c := range r.claims {
		owners := accepted[c.key]
		// Report the same winner whatever the map order: the smallest key.
		var winner *ServiceKey
		var winnerClaim claim
		for other, theirs := range owners {
			for _, t := range theirs {
				if c.overlaps(t) && (winner == nil || other.String() < winner.String()) {
					o := other
					winner, winnerClaim = &o, t
				}
			}
		}
		if winner != nil {
			return reject(r.key, ReasonServiceConflict,
				"port %q (%s, %s) overlaps port %q (%s) of service %s, which is older and keeps them; change the IPs or ports of one of the two",
				c.port, c.key, c.portsText(), winnerClaim.port, winnerClaim.portsText(), winner)
		}
	}
	return nil
}
