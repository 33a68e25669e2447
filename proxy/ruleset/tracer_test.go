package ruleset

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
)

// packet is a first packet of a new connection, as the tracer follows it through the hooks.
type packet struct {
	saddr, daddr netip.Addr
	proto        uint8
	dport        uint16
	local        bool // generated on the node (output path) rather than arriving (prerouting)
}

// outcome is what the ruleset did to the packet.
type outcome struct {
	verdict    string   // "accept", "drop", "reject-tcp-reset", "reject-icmp"
	dnat       []string // candidate destinations after DNAT ("addr" or "addr:port"), sorted
	masquerade bool
}

func (o outcome) String() string {
	return fmt.Sprintf("%s dnat=%v masq=%v", o.verdict, o.dnat, o.masquerade)
}

// tracer interprets a Ruleset the way the kernel would for one new connection. nodeAddrs are the
// addresses local to the node (fib daddr type local).
type tracer struct {
	t         *testing.T
	rs        *nft.Ruleset
	nodeAddrs []netip.Addr
	rules     map[string][]nft.Rule
	dynamic   map[string]bool            // sets the packet path fills
	dyn       map[string]map[string]bool // their elements: set -> key text
}

func newTracer(t *testing.T, rs *nft.Ruleset, nodeAddrs ...string) *tracer {
	tr := &tracer{t: t, rs: rs, rules: map[string][]nft.Rule{}, dynamic: map[string]bool{}, dyn: map[string]map[string]bool{}}
	for _, s := range rs.Sets {
		if s.Dynamic {
			tr.dynamic[s.Name] = true
		}
	}
	for _, a := range nodeAddrs {
		tr.nodeAddrs = append(tr.nodeAddrs, netip.MustParseAddr(a))
	}
	for _, r := range rs.Rules {
		tr.rules[r.Chain] = append(tr.rules[r.Chain], r)
	}
	return tr
}

type pktState struct {
	p          packet
	mark       uint32
	dnat       []string
	dnatted    bool
	masquerade bool
	// numgen choices: forced values for the first draws, and the modulus of every draw made.
	forced, moduli []uint32
	pick           func(mod uint32) uint32 // draws past forced; nil: 0
	dyn            map[string]map[string]bool
}

// run returns what can happen to p: it follows every outcome of the numgen matches on its way
// (not touching the affinity sets), and merges the DNAT candidates. Every branch must agree on
// the verdict and the masquerade.
func (tr *tracer) run(p packet) outcome {
	var merged *outcome
	var forced []uint32
	for n := 0; ; n++ {
		if n > 10000 {
			tr.t.Fatalf("trace %+v: more than 10000 numgen branches", p)
		}
		st := &pktState{forced: forced, dyn: tr.cloneDyn()}
		o := tr.once(p, st)
		if merged == nil {
			merged = &o
		} else {
			if o.verdict != merged.verdict || o.masquerade != merged.masquerade {
				tr.t.Fatalf("trace %+v: numgen branches disagree: %s and %s", p, o, merged)
			}
			merged.dnat = mergeSorted(merged.dnat, o.dnat)
		}
		// Next branch: an odometer over the draws, each digit below its modulus.
		c := append([]uint32(nil), forced...)
		for len(c) < len(st.moduli) {
			c = append(c, 0)
		}
		j := len(c) - 1
		for j >= 0 && c[j]+1 >= st.moduli[j] {
			j--
		}
		if j < 0 {
			return *merged
		}
		c[j]++
		forced = c[:j+1]
	}
}

// connect sends one new connection with numgen draws from pick and keeps what it records in
// dynamic sets (a client's affinity), as the kernel would; it returns the one destination.
func (tr *tracer) connect(p packet, pick func(mod uint32) uint32) outcome {
	st := &pktState{pick: pick, dyn: tr.cloneDyn()}
	o := tr.once(p, st)
	tr.dyn = st.dyn
	return o
}

// expire empties every dynamic set: the affinity timeout passed.
func (tr *tracer) expire() { tr.dyn = map[string]map[string]bool{} }

func (tr *tracer) cloneDyn() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for s, m := range tr.dyn {
		out[s] = map[string]bool{}
		for k := range m {
			out[s][k] = true
		}
	}
	return out
}

func mergeSorted(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string(nil), a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

func (st *pktState) draw(mod uint32) uint32 {
	i := len(st.moduli)
	st.moduli = append(st.moduli, mod)
	switch {
	case i < len(st.forced):
		return st.forced[i]
	case st.pick != nil:
		return st.pick(mod)
	}
	return 0
}

// once follows the hooks in kernel order and returns the outcome.
func (tr *tracer) once(p packet, st *pktState) outcome {
	st.p = p
	var hooks []string
	if p.local {
		hooks = []string{ChainFilterOutput, ChainNATOutput, ChainFilterOutputDNATd}
	} else {
		hooks = []string{ChainNATPrerouting, "route"}
	}
	for _, h := range hooks {
		if h == "route" {
			h = ChainFilterForward
			if tr.isLocal(st.p.daddr) {
				h = ChainFilterInput
			}
		}
		if v := tr.chain(h, st, 0); v != "" && v != "accept" {
			return outcome{verdict: v, dnat: st.dnat, masquerade: st.masquerade}
		}
	}
	tr.chain(ChainNATPostrouting, st, 0)
	sort.Strings(st.dnat)
	return outcome{verdict: "accept", dnat: st.dnat, masquerade: st.masquerade}
}

func (tr *tracer) isLocal(a netip.Addr) bool {
	for _, n := range tr.nodeAddrs {
		if n == a {
			return true
		}
	}
	return false
}

// chain evaluates a chain; "" means it fell off the end (return to the caller).
func (tr *tracer) chain(name string, st *pktState, depth int) string {
	if depth > 16 {
		tr.t.Fatalf("chain recursion too deep at %s", name)
	}
	if _, ok := tr.rules[name]; !ok && !tr.hasChain(name) {
		tr.t.Fatalf("packet reached chain %q, which the ruleset does not define", name)
	}
rules:
	for _, r := range tr.rules[name] {
		for _, e := range r.Exprs {
			v, cont := tr.expr(e, st, depth)
			if !cont {
				continue rules
			}
			switch v.Kind {
			case 0:
			case nft.VerdictJump:
				if res := tr.chain(v.Chain, st, depth+1); res != "" {
					return res
				}
			case nft.VerdictGoto:
				return tr.chain(v.Chain, st, depth+1)
			case nft.VerdictReturn:
				return ""
			case nft.VerdictAccept:
				return "accept"
			case nft.VerdictDrop:
				return "drop"
			case 255:
				return v.Chain // reject outcome carried in Chain
			}
		}
	}
	return ""
}

func (tr *tracer) hasChain(name string) bool {
	for _, c := range tr.rs.Chains {
		if c.Name == name {
			return true
		}
	}
	return false
}

func (tr *tracer) field(f nft.Field, st *pktState) nft.Value {
	switch f {
	case nft.FieldSaddr:
		return nft.Addr(st.p.saddr)
	case nft.FieldDaddr:
		return nft.Addr(st.p.daddr)
	case nft.FieldL4Proto:
		return nft.Proto(st.p.proto)
	case nft.FieldDport:
		return nft.Port(st.p.dport)
	case nft.FieldMark:
		return nft.Mark(st.mark)
	}
	tr.t.Fatalf("tracer: field %d not supported", f)
	return nft.Value{}
}

func (tr *tracer) fields(fs []nft.Field, st *pktState) []nft.Value {
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
func (tr *tracer) lookup(set string, vals []nft.Value) *nft.Element {
	for i := range tr.rs.Elements[set] {
		e := &tr.rs.Elements[set][i]
		if len(e.Key) != len(vals) {
			tr.t.Fatalf("set %s: element key has %d fields, lookup %d", set, len(e.Key), len(vals))
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
// A non-zero verdict is returned for verdict expressions and vmap hits.
func (tr *tracer) expr(e nft.Expr, st *pktState, depth int) (nft.Verdict, bool) {
	switch x := e.(type) {
	case nft.Cmp:
		eq := cmpValue(tr.field(x.Field, st), x.Value) == 0
		return nft.Verdict{}, eq != x.Neg
	case nft.CmpPrefix:
		in := x.Prefix.Contains(tr.field(x.Field, st).Addr)
		return nft.Verdict{}, in != x.Neg
	case nft.CmpSet:
		var in bool
		if tr.dynamic[x.Set] {
			in = st.dyn[x.Set][valuesText(tr.fields(x.Fields, st))]
		} else {
			in = tr.lookup(x.Set, tr.fields(x.Fields, st)) != nil
		}
		return nft.Verdict{}, in != x.Neg
	case nft.SetUpdate:
		if !tr.dynamic[x.Set] {
			tr.t.Fatalf("update of set %s, which is not dynamic", x.Set)
		}
		if st.dyn[x.Set] == nil {
			st.dyn[x.Set] = map[string]bool{}
		}
		st.dyn[x.Set][valuesText(tr.fields(x.Fields, st))] = true
	case nft.NumgenMatch:
		return nft.Verdict{}, st.draw(x.Modulus) == x.Value
	case nft.FibAddrType:
		a := st.p.saddr
		if x.Daddr {
			a = st.p.daddr
		}
		return nft.Verdict{}, tr.isLocal(a) != x.Neg
	case nft.VMap:
		el := tr.lookup(x.Map, tr.fields(x.Fields, st))
		if el == nil {
			return nft.Verdict{}, false
		}
		return *el.Verdict, true
	case nft.MarkTest:
		return nft.Verdict{}, (st.mark&x.Mask != 0) == x.NonZero
	case nft.CtState:
		return nft.Verdict{}, x.Mask&nft.CtStateNew != 0
	case nft.CtStatus:
		return nft.Verdict{}, x.Mask&nft.CtStatusDNAT != 0 && st.dnatted
	case nft.MarkOr:
		st.mark |= x.Bits
	case nft.MarkXor:
		st.mark ^= x.Bits
	case nft.Masquerade:
		st.masquerade = true
	case nft.DNAT:
		st.setDNAT([]string{dest(x.Addr, x.Port)})
		return nft.Verdict{Kind: nft.VerdictAccept}, true // nat ends the chain with its verdict
	case nft.DNATNumgen:
		// The kernel draws a slot and looks "key fields . slot" up: a missing slot would leave
		// the packet un-NATed, and a slot past the modulus would be a stale endpoint. Each slot
		// is a branch of its own (run merges them, spread weighs them).
		front := tr.fields(x.Key, st)
		if n := tr.slotCount(x.Map, front); n != int(x.Modulus) {
			tr.t.Fatalf("map %s holds %d slots for frontend %s, numgen modulus is %d", x.Map, n, valuesText(front), x.Modulus)
		}
		slot := st.draw(x.Modulus)
		el := tr.lookup(x.Map, append(append([]nft.Value(nil), front...), nft.Int(slot)))
		if el == nil {
			tr.t.Fatalf("map %s has no slot %d for frontend %s", x.Map, slot, valuesText(front))
		}
		port := uint16(0)
		if x.WithPort {
			port = uint16(el.Data[1].Num)
		}
		st.setDNAT([]string{dest(el.Data[0].Addr, port)})
		return nft.Verdict{Kind: nft.VerdictAccept}, true
	case nft.Reject:
		if x.TCPReset {
			return nft.Verdict{Kind: 255, Chain: "reject-tcp-reset"}, true
		}
		return nft.Verdict{Kind: 255, Chain: "reject-icmp"}, true
	case nft.Verdict:
		return x, true
	default:
		tr.t.Fatalf("tracer: expression %T not supported", e)
	}
	return nft.Verdict{}, true
}

// slotCount is the number of elements of set whose key starts with front (the slots of one
// frontend in an endpoint map).
func (tr *tracer) slotCount(set string, front []nft.Value) int {
	n := 0
	for _, e := range tr.rs.Elements[set] {
		if len(e.Key) == len(front)+1 && valuesText(e.Key[:len(front)]) == valuesText(front) {
			n++
		}
	}
	return n
}

func dest(a netip.Addr, port uint16) string {
	if port == 0 {
		return a.String()
	}
	return netip.AddrPortFrom(a, port).String()
}

// setDNAT records the candidates; for the rest of the path the packet is addressed to the first
// (they are all equivalent for the checks that follow).
func (st *pktState) setDNAT(ds []string) {
	st.dnat = ds
	st.dnatted = true
	d := ds[0]
	if ap, err := netip.ParseAddrPort(d); err == nil {
		st.p.daddr, st.p.dport = ap.Addr(), ap.Port()
	} else {
		st.p.daddr = netip.MustParseAddr(d)
	}
}

func tcp(saddr, daddr string, port uint16) packet {
	return packet{saddr: netip.MustParseAddr(saddr), daddr: netip.MustParseAddr(daddr), proto: unix.IPPROTO_TCP, dport: port}
}

func udp(saddr, daddr string, port uint16) packet {
	p := tcp(saddr, daddr, port)
	p.proto = unix.IPPROTO_UDP
	return p
}

func joinDNAT(ds ...string) string { return strings.Join(ds, ",") }

func valuesText(vs []nft.Value) string {
	return string(appendValues(nil, vs))
}
