// Package trace follows one packet through an nft.Ruleset the way the kernel would, and says
// what the ruleset does to it: the verdict (accept, drop, a reject), the destinations DNAT can
// send it to and with what probability, and whether it is masqueraded.
//
// It exists so that tests (and tools) can say "a TCP packet from A to ClusterIP:80 reaches
// endpoints B and C, masqueraded" instead of asserting rule text, and say it about any Ruleset:
// one the builder returns, or one read back from a kernel or from nft.Fake after a partial sync.
// It knows the nft model only (base chains and their hooks and priorities, rules, sets, verdict
// maps, the frontend-keyed numgen endpoint maps, marks, fib, ct, reject), never how nftproxy
// names its chains, so a wrong chain layout shows up as a wrong trace, not as a tracer that
// agrees with the builder by construction. It lives beside nft because when nft learns a new
// expression, this interpreter must learn what it does.
//
// The path of a packet: one arriving at the node goes through the prerouting base chains, then
// input if its (possibly DNATed) destination is a node address, else forward, then postrouting;
// one the node generates (Packet.Local) goes through output, then postrouting. Base chains of a
// hook run in priority order; an accept ends one base chain, a drop or reject ends the packet.
// The packet is always the first of a new connection (ct state new).
//
// A numgen draw is a branch: Run follows every branch and merges their destinations, Spread
// weighs each by its probability, Connect takes draws from a caller's source and keeps what the
// packet wrote into dynamic sets (session affinity) for the next packet.
//
// Path records the steps of one packet (base chains met, rules that acted, map elements hit):
// `nftproxy explain` (proxy/explain) runs it on the tables read back from a live node's kernel
// and reads the comments of those steps to say which Service, and why a packet is dropped.
package trace

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
)

// Packet is the first packet of a new connection.
type Packet struct {
	Saddr, Daddr netip.Addr
	Proto        uint8 // unix.IPPROTO_TCP, ...
	Dport        uint16
	// Local says the node generated the packet (output path) rather than received it
	// (prerouting path).
	Local bool
	// Socket is the socket of the node that the kernel finds for an arriving packet (a
	// listener on its destination address and port); nil: none, and a socket lookup stops its
	// rule. A Local packet meets its own sending socket instead (bound to its source address,
	// not transparent), as the kernel's lookup does at output.
	Socket *Socket
}

// Socket is what a socket lookup ("socket wildcard", "socket transparent") reads.
type Socket struct {
	Wildcard    bool // bound to the wildcard address
	Transparent bool // IP_TRANSPARENT
}

// TCP returns a TCP packet arriving at the node.
func TCP(saddr, daddr netip.Addr, port uint16) Packet {
	return Packet{Saddr: saddr, Daddr: daddr, Proto: unix.IPPROTO_TCP, Dport: port}
}

// UDP returns a UDP packet arriving at the node.
func UDP(saddr, daddr netip.Addr, port uint16) Packet {
	p := TCP(saddr, daddr, port)
	p.Proto = unix.IPPROTO_UDP
	return p
}

// Verdict is what finally happened to the packet.
type Verdict string

// Verdicts. A reject is told apart by what the sender sees.
const (
	Accept         Verdict = "accept"
	Drop           Verdict = "drop"
	RejectTCPReset Verdict = "reject-tcp-reset"
	RejectICMP     Verdict = "reject-icmp"
)

// Outcome is what the ruleset did to a packet.
type Outcome struct {
	Verdict Verdict
	// DNAT lists the destinations the packet can be sent to ("addr" or "addr:port"), sorted;
	// nil if it was not DNATed.
	DNAT       []string
	Masquerade bool
}

// String is a one-line form for test failures.
func (o Outcome) String() string {
	return fmt.Sprintf("%s dnat=%v masq=%v", o.Verdict, o.DNAT, o.Masquerade)
}

// maxBranches bounds Run and Spread: a ruleset whose draws multiply past it is not one nftproxy
// writes (it draws once per packet), so the tracer refuses rather than run for minutes.
const maxBranches = 10000

// Tracer interprets one Ruleset. It is not safe for concurrent use (Connect changes it).
type Tracer struct {
	rs        *nft.Ruleset
	nodeAddrs []netip.Addr
	rules     map[string][]nft.Rule
	chains    map[string]nft.Chain
	dynamic   map[string]bool                   // sets the packet path fills
	dyn       map[string]map[string][]nft.Value // their elements: set -> key text -> data (maps)
}

// New returns a tracer of rs on a node whose local addresses (fib daddr type local) are
// nodeAddrs.
func New(rs *nft.Ruleset, nodeAddrs ...netip.Addr) *Tracer {
	tr := &Tracer{rs: rs, nodeAddrs: nodeAddrs, rules: map[string][]nft.Rule{}, chains: map[string]nft.Chain{},
		dynamic: map[string]bool{}, dyn: map[string]map[string][]nft.Value{}}
	for _, s := range rs.Sets {
		if s.Dynamic {
			tr.dynamic[s.Name] = true
		}
	}
	for _, c := range rs.Chains {
		tr.chains[c.Name] = c
	}
	for _, r := range rs.Rules {
		tr.rules[r.Chain] = append(tr.rules[r.Chain], r)
	}
	return tr
}

// Error is a ruleset the tracer cannot follow, or one the kernel would not run the way it was
// meant to: a jump to a missing chain, an endpoint map whose slots do not match its numgen
// modulus, a lookup with the wrong number of key fields, an expression it does not know.
type Error struct {
	Packet Packet
	Reason string
}

// Error says which packet and what went wrong, for a test failure or a tool's answer.
func (e *Error) Error() string {
	return fmt.Sprintf("trace %s %s -> %s:%d: %s", ProtoName(e.Packet.Proto), e.Packet.Saddr, e.Packet.Daddr, e.Packet.Dport, e.Reason)
}

// ProtoName is how nft writes a layer-4 protocol (tcp, udp, sctp), and "proto N" for others.
func ProtoName(p uint8) string {
	switch p {
	case unix.IPPROTO_TCP:
		return "tcp"
	case unix.IPPROTO_UDP:
		return "udp"
	case unix.IPPROTO_SCTP:
		return "sctp"
	}
	return fmt.Sprintf("proto %d", p)
}

// failure carries an Error up through the evaluation by panic; catch turns it back into an
// error at the API boundary. Any other panic is a bug and goes on.
type failure struct{ reason string }

func fail(format string, args ...any) { panic(failure{fmt.Sprintf(format, args...)}) }

func catch(p Packet, err *error) {
	if r := recover(); r != nil {
		f, ok := r.(failure)
		if !ok {
			panic(r)
		}
		*err = &Error{Packet: p, Reason: f.reason}
	}
}

// Run returns what can happen to p: it follows every outcome of the numgen draws on its way
// (not recording into dynamic sets) and merges their destinations. Every branch must agree on
// the verdict and the masquerade, or Run fails: nftproxy never lets a draw decide those.
func (tr *Tracer) Run(p Packet) (out Outcome, err error) {
	defer catch(p, &err)
	var merged *Outcome
	var forced []uint32
	for n := 0; ; n++ {
		if n > maxBranches {
			fail("more than %d numgen branches", maxBranches)
		}
		st := &state{forced: forced, dyn: tr.cloneDyn()}
		o := tr.once(p, st)
		if merged == nil {
			merged = &o
		} else {
			if o.Verdict != merged.Verdict || o.Masquerade != merged.Masquerade {
				fail("numgen branches disagree: %s and %s", o, merged)
			}
			merged.DNAT = mergeSorted(merged.DNAT, o.DNAT)
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
			return *merged, nil
		}
		c[j]++
		forced = c[:j+1]
	}
}

// Spread returns how often a new client's packet p goes to each destination, over every numgen
// branch weighed by its probability: the load balancing the ruleset does. A branch that is not
// DNATed to exactly one destination (a drop, a reject, no DNAT) fails, so call it only where
// Run says the packet is DNATed.
func (tr *Tracer) Spread(p Packet) (out map[string]float64, err error) {
	defer catch(p, &err)
	out = map[string]float64{}
	n := 0
	var walk func(forced []uint32, weight float64)
	walk = func(forced []uint32, weight float64) {
		if n++; n > maxBranches {
			fail("more than %d numgen branches", maxBranches)
		}
		st := &state{forced: forced, dyn: tr.cloneDyn()}
		o := tr.once(p, st)
		if len(st.moduli) == len(forced) {
			if len(o.DNAT) != 1 {
				fail("a whole branch gave %s, want one destination", o)
			}
			out[o.DNAT[0]] += weight
			return
		}
		m := st.moduli[len(forced)]
		for v := uint32(0); v < m; v++ {
			walk(append(append([]uint32(nil), forced...), v), weight/float64(m))
		}
	}
	walk(nil, 1)
	return out, nil
}

// Connect sends one new connection, drawing numgen results from pick (a draw of modulus mod
// returns a value below mod), and keeps what the packet recorded in dynamic sets (a client's
// session affinity), as the kernel would; the outcome has at most one destination.
func (tr *Tracer) Connect(p Packet, pick func(mod uint32) uint32) (out Outcome, err error) {
	defer catch(p, &err)
	st := &state{pick: pick, dyn: tr.cloneDyn()}
	o := tr.once(p, st)
	tr.dyn = st.dyn
	return o, nil
}

// Expire empties every dynamic set, as if their timeouts passed.
func (tr *Tracer) Expire() { tr.dyn = map[string]map[string][]nft.Value{} }

func (tr *Tracer) cloneDyn() map[string]map[string][]nft.Value {
	out := map[string]map[string][]nft.Value{}
	for s, m := range tr.dyn {
		out[s] = map[string][]nft.Value{}
		for k, d := range m {
			out[s][k] = d
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

func keyText(vs []nft.Value) string {
	var b strings.Builder
	for i, v := range vs {
		if i > 0 {
			b.WriteString(" . ")
		}
		if v.Type == nft.TypeIPv4Addr || v.Type == nft.TypeIPv6Addr {
			b.WriteString(v.Addr.String())
		} else {
			fmt.Fprint(&b, v.Num)
		}
	}
	return b.String()
}
