package trace

import (
	"net/netip"
	"sort"

	"github.com/nftproxy/nftproxy/nft"
)

// state is one packet on its way through the hooks, in one numgen branch.
type state struct {
	p          Packet
	orig       Packet // p as it arrived: the connection's original tuple
	mark       uint32
	dnat       []string
	dnatted    bool
	masquerade bool
	// numgen choices: forced values for the first draws, and the modulus of every draw made.
	forced, moduli []uint32
	pick           func(mod uint32) uint32 // draws past forced; nil: 0
	dyn            map[string]map[string][]nft.Value
	// path, when non-nil, receives every step (Tracer.Path); hit is the element of the last
	// vmap lookup that matched, for the step that records it.
	path *[]Step
	hit  *Step
}

func (st *state) draw(mod uint32) uint32 {
	i := len(st.moduli)
	st.moduli = append(st.moduli, mod)
	switch {
	case i < len(st.forced):
		return st.forced[i]
	case st.pick != nil:
		if v := st.pick(mod); v < mod {
			return v
		}
		fail("pick returned a value past numgen modulus %d", mod)
	}
	return 0
}

// setDNAT records the destination; for the rest of the path the packet is addressed to it.
func (st *state) setDNAT(a netip.Addr, port uint16) {
	d := a.String()
	st.p.Daddr = a
	if port != 0 {
		d = netip.AddrPortFrom(a, port).String()
		st.p.Dport = port
	}
	st.dnat, st.dnatted = []string{d}, true
}

// reject is the internal verdict kind of a reject statement; its Verdict rides in Chain.
const reject nft.VerdictKind = 255

// once follows the hooks in kernel order and returns the outcome.
func (tr *Tracer) once(p Packet, st *state) Outcome {
	st.p, st.orig = p, p
	var hooks []nft.Hook
	if p.Local {
		hooks = []nft.Hook{nft.HookOutput, nft.HookPostrouting}
	} else {
		hooks = []nft.Hook{nft.HookPrerouting, "route", nft.HookPostrouting}
	}
	for _, h := range hooks {
		if h == "route" {
			if tr.isLocal(st.p.Daddr) {
				h = nft.HookInput
			} else {
				h = nft.HookForward
			}
		}
		for _, c := range tr.baseChains(h) {
			st.record(Step{Chain: c.Name, Rule: -1, Hook: h})
			v := tr.chain(c.Name, st, 0)
			if v == "" && c.Base.Policy == nft.PolicyDrop {
				st.record(Step{Chain: c.Name, Rule: -1, Hook: h, Did: []string{"policy drop"}})
				v = Drop
			}
			if v != "" && v != Accept {
				return Outcome{Verdict: v, DNAT: st.dnat, Masquerade: st.masquerade}
			}
		}
		if h == nft.HookInput {
			break // delivered here: no postrouting
		}
	}
	sort.Strings(st.dnat)
	return Outcome{Verdict: Accept, DNAT: st.dnat, Masquerade: st.masquerade}
}

// baseChains are the chains attached to hook h, in priority order (lowest first, as the
// kernel runs them; equal priorities in the order of the ruleset).
func (tr *Tracer) baseChains(h nft.Hook) []nft.Chain {
	var out []nft.Chain
	for _, c := range tr.rs.Chains {
		if c.Base != nil && c.Base.Hook == h {
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Base.Priority < out[j].Base.Priority })
	return out
}

func (tr *Tracer) isLocal(a netip.Addr) bool {
	for _, n := range tr.nodeAddrs {
		if n == a {
			return true
		}
	}
	return false
}

// chain evaluates a chain; "" means it fell off the end (return to the caller).
func (tr *Tracer) chain(name string, st *state, depth int) Verdict {
	if depth > 16 {
		fail("jumps nest deeper than 16 at chain %s", name)
	}
	if _, ok := tr.chains[name]; !ok {
		fail("the packet reached chain %q, which the ruleset does not define", name)
	}
rules:
	for i, r := range tr.rules[name] {
		st.hit = nil
		var did []string
		for j, e := range r.Exprs {
			v, cont := tr.expr(e, st)
			if !cont {
				continue rules
			}
			if st.path != nil {
				did = append(did, st.describe(e, v)...)
				if v.Kind != 0 && v.Kind != nft.VerdictContinue || len(did) > 0 && j == len(r.Exprs)-1 {
					st.recordRule(name, i, r.Comment, did)
					did = nil
				}
			}
			switch v.Kind {
			case 0, nft.VerdictContinue:
			case nft.VerdictJump:
				if res := tr.chain(v.Chain, st, depth+1); res != "" {
					return res
				}
				continue rules
			case nft.VerdictGoto:
				return tr.chain(v.Chain, st, depth+1)
			case nft.VerdictReturn:
				return ""
			case nft.VerdictAccept:
				return Accept
			case nft.VerdictDrop:
				return Drop
			case reject:
				return Verdict(v.Chain)
			}
		}
	}
	return ""
}

func (tr *Tracer) field(f nft.Field, st *state) nft.Value {
	switch f {
	case nft.FieldSaddr:
		return nft.Addr(st.p.Saddr)
	case nft.FieldDaddr:
		return nft.Addr(st.p.Daddr)
	case nft.FieldL4Proto:
		return nft.Proto(st.p.Proto)
	case nft.FieldDport:
		return nft.Port(st.p.Dport)
	case nft.FieldMark:
		return nft.Mark(st.mark)
	// The connection's tuples: the original one is what the client sent; the reply one comes
	// from the address (and port) DNAT chose, the packet's own until a DNAT.
	case nft.FieldCtOrigDaddr:
		return nft.Addr(st.orig.Daddr)
	case nft.FieldCtOrigProtoDst:
		return nft.Port(st.orig.Dport)
	case nft.FieldCtReplySaddr:
		return nft.Addr(st.p.Daddr)
	case nft.FieldCtReplyProtoSrc:
		return nft.Port(st.p.Dport)
	}
	fail("field %d is not supported", f)
	return nft.Value{}
}

func (tr *Tracer) fields(fs []nft.Field, st *state) []nft.Value {
	var out []nft.Value
	for _, f := range fs {
		out = append(out, tr.field(f, st))
	}
	return out
}

func cmpValue(a, b nft.Value) int {
	if a.Type == nft.TypeIPv4Addr || a.Type == nft.TypeIPv6Addr {
		return a.Addr.Compare(b.Addr)
	}
	switch {
	case a.Num < b.Num:
		return -1
	case a.Num > b.Num:
		return 1
	}
	return 0
}

// lookup finds the element of set whose key (or interval) holds vals.
func (tr *Tracer) lookup(set string, vals []nft.Value) *nft.Element {
	for i := range tr.rs.Elements[set] {
		e := &tr.rs.Elements[set][i]
		if len(e.Key) != len(vals) {
			fail("set %s: an element key has %d fields, the lookup %d", set, len(e.Key), len(vals))
		}
		end := e.KeyEnd
		if end == nil {
			end = e.Key
		}
		ok := true
		for j := range vals {
			if cmpValue(vals[j], e.Key[j]) < 0 || cmpValue(vals[j], end[j]) > 0 {
				ok = false
				break
			}
		}
		if ok {
			return e
		}
	}
	return nil
}

// expr evaluates one expression; cont false means the rule stops here (a match failed).
// A non-zero verdict is returned for verdict expressions, vmap hits and NAT statements.
func (tr *Tracer) expr(e nft.Expr, st *state) (v nft.Verdict, cont bool) {
	switch x := e.(type) {
	case nft.Cmp:
		return v, (cmpValue(tr.field(x.Field, st), x.Value) == 0) != x.Neg
	case nft.CmpPrefix:
		return v, x.Prefix.Contains(tr.field(x.Field, st).Addr) != x.Neg
	case nft.CmpSet:
		var in bool
		if tr.dynamic[x.Set] {
			_, in = st.dyn[x.Set][keyText(tr.fields(x.Fields, st))]
		} else {
			in = tr.lookup(x.Set, tr.fields(x.Fields, st)) != nil
		}
		return v, in != x.Neg
	case nft.SetUpdate:
		if !tr.dynamic[x.Set] {
			fail("update of set %s, which is not dynamic", x.Set)
		}
		if st.dyn[x.Set] == nil {
			st.dyn[x.Set] = map[string][]nft.Value{}
		}
		// An element that exists keeps its data (the kernel only refreshes its expiration).
		if k := keyText(tr.fields(x.Fields, st)); st.dyn[x.Set][k] == nil {
			data := append([]nft.Value{}, x.Data...)
			if len(x.DataFields) > 0 {
				data = tr.fields(x.DataFields, st)
			}
			st.dyn[x.Set][k] = data
		}
	case nft.DNATMap:
		var data []nft.Value
		key := tr.fields(x.Fields, st)
		if tr.dynamic[x.Map] {
			data = st.dyn[x.Map][keyText(key)]
		} else if el := tr.lookup(x.Map, key); el != nil {
			data = el.Data
		}
		if len(data) == 0 {
			return v, false // no element: the rule stops, the packet goes on
		}
		port := x.Port
		if x.WithPort {
			if len(data) < 2 {
				fail("map %s: element %s has no port", x.Map, keyText(key))
			}
			port = uint16(data[1].Num)
		}
		st.setDNAT(data[0].Addr, port)
		return nft.Verdict{Kind: nft.VerdictAccept}, true
	case nft.NumgenMatch:
		return v, st.draw(x.Modulus) == x.Value
	case nft.FibAddrType:
		a := st.p.Saddr
		if x.Daddr {
			a = st.p.Daddr
		}
		return v, tr.isLocal(a) != x.Neg
	case nft.VMap:
		el := tr.lookup(x.Map, tr.fields(x.Fields, st))
		if el == nil {
			return v, false
		}
		if el.Verdict == nil {
			fail("vmap %s: element %s has no verdict", x.Map, keyText(el.Key))
		}
		st.hit = &Step{Map: x.Map, Element: el}
		return *el.Verdict, true
	case nft.MarkTest:
		return v, (st.mark&x.Mask != 0) == x.NonZero
	case nft.CtState:
		return v, x.Mask&nft.CtStateNew != 0
	case nft.CtStatus:
		return v, x.Mask&nft.CtStatusDNAT != 0 && st.dnatted
	case nft.MarkOr:
		st.mark |= x.Bits
	case nft.MarkXor:
		st.mark ^= x.Bits
	case nft.Masquerade:
		st.masquerade = true
		return nft.Verdict{Kind: nft.VerdictAccept}, true // like every nat statement
	case nft.DNAT:
		st.setDNAT(x.Addr, x.Port)
		return nft.Verdict{Kind: nft.VerdictAccept}, true // nat ends the chain with its verdict
	case nft.DNATNumgen:
		return tr.dnatNumgen(x, st), true
	case nft.SocketMatch:
		sk := st.p.Socket
		if st.p.Local {
			sk = &Socket{} // the sending socket
		}
		if sk == nil {
			return v, false
		}
		got := sk.Transparent
		if x.Key == nft.SocketWildcard {
			got = sk.Wildcard
		}
		return v, got == x.Value
	case nft.Redirect:
		// To the node itself: loopback at output; at prerouting the kernel takes the incoming
		// interface's first address, which the tracer does not know: it keeps the address the
		// packet arrived on, an address of the node too.
		a := st.p.Daddr
		if st.p.Local {
			a = netip.IPv6Loopback()
			if a4 := st.p.Daddr.Unmap(); a4.Is4() {
				a = netip.AddrFrom4([4]byte{127, 0, 0, 1})
			}
		}
		st.setDNAT(a, x.Port)
		return nft.Verdict{Kind: nft.VerdictAccept}, true
	case nft.Reject:
		if x.TCPReset {
			return nft.Verdict{Kind: reject, Chain: string(RejectTCPReset)}, true
		}
		return nft.Verdict{Kind: reject, Chain: string(RejectICMP)}, true
	case nft.Verdict:
		return x, true
	default:
		fail("expression %T is not supported", e)
	}
	return v, true
}

// dnatNumgen draws a slot and looks "key fields . slot" up, as the kernel does. A missing slot
// would leave the packet un-NATed and a slot past the modulus would be a stale endpoint, so the
// frontend must hold exactly modulus slots. Each slot is a branch of its own.
func (tr *Tracer) dnatNumgen(x nft.DNATNumgen, st *state) nft.Verdict {
	front := tr.fields(x.Key, st)
	if n := tr.slotCount(x.Map, front); n != int(x.Modulus) {
		fail("map %s holds %d slots for frontend %s, numgen modulus is %d", x.Map, n, keyText(front), x.Modulus)
	}
	slot := st.draw(x.Modulus)
	el := tr.lookup(x.Map, append(append([]nft.Value(nil), front...), nft.Int(slot)))
	if el == nil {
		fail("map %s has no slot %d for frontend %s", x.Map, slot, keyText(front))
	}
	port := uint16(0)
	if x.WithPort {
		if len(el.Data) < 2 {
			fail("map %s: slot %d of frontend %s has no port", x.Map, slot, keyText(front))
		}
		port = uint16(el.Data[1].Num)
	}
	st.setDNAT(el.Data[0].Addr, port)
	return nft.Verdict{Kind: nft.VerdictAccept}
}

// slotCount is the number of elements of set whose key starts with front (the slots of one
// frontend in an endpoint map).
func (tr *Tracer) slotCount(set string, front []nft.Value) int {
	n := 0
elements:
	for _, e := range tr.rs.Elements[set] {
		if len(e.Key) != len(front)+1 {
			continue
		}
		// Compared field by field, not as text: a table read back from a node at 10k Services
		// holds 100k endpoint slots, and explain counts them for every numgen branch.
		for i, v := range front {
			if e.Key[i].Type != v.Type || cmpValue(e.Key[i], v) != 0 {
				continue elements
			}
		}
		n++
	}
	return n
}
