// Package explain answers, on a live node, "what does this Service do here, and why does my
// connection fail?" from what the kernel holds: nftproxy's tables read back over netlink
// (never the model the daemon intends), traced with nft/trace. For a packet (a destination,
// optionally a source) it says which Service and frontend it meets, the path of chains, the
// endpoints with their probabilities, whether it is masqueraded, and every drop or reject on
// the way with the rule or map element that decided it. For a Service it does so for each of
// its frontends found in the kernel; a Service the daemon did not program leaves nothing there,
// so its reason comes from the daemon's rejections (Status, served at RejectionsPath).
//
// It knows how nftproxy names its maps and chains (proxy/ruleset) to word the answer; the
// verdicts and probabilities come from the tracer alone. A Node can as well hold the tables
// render builds (`explain --manifests`): the same answer about what run would apply.
package explain

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/nft/trace"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// Kernel is what explain reads: nft.Kernel on a node, nft.Fake in tests.
type Kernel interface {
	Dump(ctx context.Context, t nft.Table) (*nft.Ruleset, error)
	ListTables(ctx context.Context, f nft.Family) ([]string, error)
}

// Node is one node's state as explain sees it.
type Node struct {
	// Tables are nftproxy's tables as the kernel holds them (ip, then ip6; absent ones left out).
	Tables []*nft.Ruleset
	// Addrs are the node's local addresses (what "fib daddr type local" matches).
	Addrs []netip.Addr
	// Rejections are the daemon's current rejections; RejectionsErr says why they could not be
	// read (then a Service missing from the kernel is reported as unknown, with that error).
	Rejections    []Rejection
	RejectionsErr error
}

// ReadTables dumps nftproxy's table (named table) of each family from k.
func ReadTables(ctx context.Context, k Kernel, table string) ([]*nft.Ruleset, error) {
	var out []*nft.Ruleset
	for _, fam := range []nft.Family{nft.IPv4, nft.IPv6} {
		names, err := k.ListTables(ctx, fam)
		if err != nil {
			return nil, fmt.Errorf("list %s tables: %w", fam, err)
		}
		for _, n := range names {
			if n != table {
				continue
			}
			rs, err := k.Dump(ctx, nft.Table{Family: fam, Name: n})
			if err != nil {
				return nil, fmt.Errorf("read table %s %s: %w", fam, n, err)
			}
			out = append(out, rs)
		}
	}
	return out, nil
}

// outsideV4 and outsideV6 stand for "a client outside the cluster" when no source is given:
// documentation addresses (RFC 5737, RFC 3849), in no cluster, node or source range.
var (
	outsideV4 = netip.MustParseAddr("203.0.113.1")
	outsideV6 = netip.MustParseAddr("2001:db8::1")
)

// Outside is the source explain uses when none is given, for a destination of a's family.
func Outside(a netip.Addr) netip.Addr {
	if a.Is4() {
		return outsideV4
	}
	return outsideV6
}

// Packet builds the packet explain traces: from src (invalid: a client outside the cluster),
// sent by the node itself when src is one of its addresses.
func (n *Node) Packet(src, dst netip.Addr, proto uint8, port uint16) trace.Packet {
	dst = dst.Unmap()
	if !src.IsValid() {
		src = Outside(dst)
	}
	src = src.Unmap()
	return trace.Packet{Saddr: src, Daddr: dst, Proto: proto, Dport: port, Local: n.isLocal(src)}
}

func (n *Node) isLocal(a netip.Addr) bool {
	for _, l := range n.Addrs {
		if l == a {
			return true
		}
	}
	return false
}

// table is the table of a's family, nil if the kernel holds none.
func (n *Node) table(a netip.Addr) *nft.Ruleset {
	fam := nft.IPv6
	if a.Is4() {
		fam = nft.IPv4
	}
	for _, rs := range n.Tables {
		if rs.Table.Family == fam {
			return rs
		}
	}
	return nil
}

// Answer is what the kernel does to one packet, and why.
type Answer struct {
	Packet trace.Packet
	// Table is the table that decided; zero when the kernel holds none of that family.
	Table nft.Table
	// Port is the Service port the packet met ("ns/name/tcp/http", the dispatch element's
	// comment); empty when it met none. Frontend says which kind of address: "ClusterIP",
	// "LoadBalancer or external IP", "node port", with "port range" or "all-ports" added.
	Port, Frontend string
	Outcome        trace.Outcome
	// Spread is each endpoint's share of new connections, when the packet is DNATed.
	Spread map[string]float64
	// Chains are the chains the packet went through, in order.
	Chains []string
	// Masquerade says why it is masqueraded (the rules that asked for it), when it is.
	Masquerade []string
	// Reasons are the drops and rejects on the way: what decided each, in words.
	Reasons []string
	Steps   []trace.Step
	// Err is a ruleset the tracer could not follow (a broken table is an answer too).
	Err error
}

// Explain traces p through the node's table of its family.
func (n *Node) Explain(p trace.Packet) Answer {
	a := Answer{Packet: p}
	rs := n.table(p.Daddr)
	if rs == nil {
		a.Err = fmt.Errorf("the kernel holds no nftproxy table for %s: nftproxy does not program this family here", p.Daddr)
		return a
	}
	a.Table = rs.Table
	tr := trace.New(rs, n.Addrs...)
	out, steps, err := tr.Path(p)
	if err != nil {
		a.Err = err
		return a
	}
	a.Outcome, a.Steps = out, steps
	if out.Verdict == trace.Accept && len(out.DNAT) > 0 {
		if s, err := tr.Spread(p); err == nil {
			a.Spread = s
		} else {
			a.Err = err
		}
	}
	a.read(rs)
	return a
}

// read words the steps: the Service port met, the chains, why masqueraded, why dropped.
func (a *Answer) read(rs *nft.Ruleset) {
	masqBits := map[string]bool{}
	for _, r := range rs.Rules {
		for _, e := range r.Exprs {
			if x, ok := e.(nft.MarkXor); ok && r.Chain == ruleset.ChainMasquerading {
				masqBits[fmt.Sprintf("%#x", x.Bits)] = true
			}
		}
	}
	for _, s := range a.Steps {
		if s.Rule < 0 && s.Did == nil {
			continue
		}
		if len(a.Chains) == 0 || a.Chains[len(a.Chains)-1] != s.Chain {
			a.Chains = append(a.Chains, s.Chain)
		}
		if s.Element != nil && a.Port == "" && s.Element.Comment != "" {
			a.Port, a.Frontend = s.Element.Comment, frontend(rs, s.Map, a.Packet.Daddr)
		}
	}
	for _, s := range a.Steps {
		for _, d := range s.Did {
			bit, ok := strings.CutPrefix(d, "meta mark |= ")
			if !ok {
				continue
			}
			why := stepWords(s)
			if masqBits[bit] {
				if a.Outcome.Masquerade {
					a.Masquerade = append(a.Masquerade, why)
				}
			} else if a.Outcome.Verdict == trace.Drop {
				a.Reasons = append(a.Reasons, why+" (marked to drop)")
			}
		}
		switch {
		case s.Map == ruleset.MapNoEndpointServices || s.Map == ruleset.MapNoEndpointAllPorts || s.Map == ruleset.MapNoEndpointNodePorts:
			if has(s.Did, "vmap @"+s.Map+": drop") {
				a.Reasons = append(a.Reasons, fmt.Sprintf("%s has no endpoint on this node (internalTrafficPolicy Local): dropped [%s]", s.Element.Comment, s.Map))
			} else {
				a.Reasons = append(a.Reasons, fmt.Sprintf("%s has no endpoints: rejected [%s]", s.Element.Comment, s.Map))
			}
		case s.Chain == ruleset.ChainClusterIPsCheck && !has(s.Did, "drop"):
			a.Reasons = append(a.Reasons, fmt.Sprintf("%s is a ClusterIP, but no Service has port %s/%d on it: rejected [%s]",
				a.Packet.Daddr, trace.ProtoName(a.Packet.Proto), a.Packet.Dport, s.Chain))
		case has(s.Did, "policy drop"):
			a.Reasons = append(a.Reasons, fmt.Sprintf("the policy of base chain %s: dropped", s.Chain))
		case has(s.Did, "drop") && s.Map == "":
			a.Reasons = append(a.Reasons, "dropped by "+stepWords(s))
		}
	}
	if a.Outcome.Masquerade && len(a.Masquerade) == 0 {
		// Not asked for by a mark (the hairpin rule): name the rule that masqueraded.
		for _, s := range a.Steps {
			if has(s.Did, "masquerade") {
				a.Masquerade = append(a.Masquerade, stepWords(s))
			}
		}
	}
}

// stepWords names a step for a person: its chain and rule, and its comment.
func stepWords(s trace.Step) string {
	w := fmt.Sprintf("%s rule %d", s.Chain, s.Rule)
	if s.Comment != "" {
		w += ` "` + s.Comment + `"`
	}
	return w
}

// frontend words which dispatch map the packet met.
func frontend(rs *nft.Ruleset, m string, daddr netip.Addr) string {
	addrKind := "LoadBalancer or external IP"
	for _, e := range rs.Elements[ruleset.SetClusterIPs] {
		if len(e.Key) == 1 && e.Key[0].Addr == daddr {
			addrKind = "ClusterIP"
		}
	}
	switch m {
	case ruleset.MapServiceIPs, ruleset.MapNoEndpointServices:
		return addrKind
	case ruleset.MapServiceRanges:
		return addrKind + ", port range"
	case ruleset.MapServiceAllPorts, ruleset.MapNoEndpointAllPorts:
		return addrKind + ", all-ports"
	case ruleset.MapNodePorts, ruleset.MapNodePortRanges, ruleset.MapNoEndpointNodePorts:
		return "node port"
	}
	return m
}

func has(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// sortedSpread lists a spread's destinations in order.
func sortedSpread(s map[string]float64) []string {
	out := make([]string, 0, len(s))
	for d := range s {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}
