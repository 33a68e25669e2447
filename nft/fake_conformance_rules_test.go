package nft

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// confEveryExpr adds, to table f, base and regular chains whose rules use every expression shape
// that can be sent, each where the kernel allows it.
func confEveryExpr(f Family) []confBuild {
	a1, a2, pfx, src := "198.18.0.1", "198.18.0.2", "198.18.0.0/15", "198.18.5.5"
	if f == IPv6 {
		a1, a2, pfx, src = "fd00::1", "fd00::2", "fd00::/16", "fd00::5:5"
	}
	addr := f.AddrType()
	return []confBuild{
		add(&TableObj{}),
		add(base("nat-prerouting", ChainTypeNAT, HookPrerouting, -100)),
		add(base("nat-postrouting", ChainTypeNAT, HookPostrouting, 100)),
		add(&Chain{Name: "filter-input", Base: &BaseChain{Type: ChainTypeFilter, Hook: HookInput, Priority: 0, Policy: PolicyAccept}}),
		add(&Chain{Name: "filter-forward", Base: &BaseChain{Type: ChainTypeFilter, Hook: HookForward, Priority: -10, Policy: PolicyDrop}}),
		add(ch("services")), add(ch("svc-x/ns/web/tcp/http")), add(ch("reject-chain")), add(ch("mark-for-masquerade")),
		add(&Set{Name: "service-ips", Key: []Type{addr, TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict}, Interval: true, Comment: "dispatch"}),
		add(&Set{Name: "cluster-ips", Key: []Type{addr}}),
		add(&Set{Name: "hairpin", Key: []Type{addr, addr, TypeInetProto, TypeInetService}}),
		add(&Set{Name: "marks", Key: []Type{TypeMark}}),
		add(&Set{Name: "aff", Key: []Type{addr}, Dynamic: true, Timeout: 3 * time.Hour}),
		add(&Set{Name: "ep-web", Key: []Type{TypeInteger}, Data: []Type{addr, TypeInetService}, NumgenKey: 2}),
		add(&Set{Name: "ep-rtp", Key: []Type{TypeInteger}, Data: []Type{addr}, NumgenKey: 1}),
		add(&Element{Set: "ep-web", Key: key(Int(0)), Data: key(v(a1), Port(8080))}),
		add(&Element{Set: "ep-web", Key: key(Int(1)), Data: key(v(a2), Port(8080))}),
		add(&Element{Set: "ep-rtp", Key: key(Int(0)), Data: key(v(a1))}),
		add(elem("cluster-ips", v(a1))),
		add(elem("marks", Mark(0x4000))),
		add(velem("service-ips", goTo("svc-x/ns/web/tcp/http"), v(a1), Proto(tcp), Port(80))),
		add(rule("nat-prerouting", "dispatch", VMap{Fields: []Field{FieldDaddr, FieldL4Proto, FieldDport}, Map: "service-ips"})),
		add(rule("nat-prerouting", "", Cmp{Field: FieldL4Proto, Value: Proto(udp)}, Cmp{Field: FieldDport, Neg: true, Value: Port(53)},
			Cmp{Field: FieldSport, Value: Port(1024)}, Cmp{Field: FieldMark, Neg: true, Value: Mark(0x8000)}, jump("services"))),
		add(rule("services", "cluster traffic", CmpSet{Fields: []Field{FieldDaddr}, Set: "cluster-ips"},
			CmpPrefix{Field: FieldSaddr, Neg: true, Prefix: netip.MustParsePrefix(pfx)}, MarkOr{Bits: 0x4000})),
		add(rule("services", "", CmpPrefix{Field: FieldDaddr, Prefix: netip.MustParsePrefix(pfx)}, CmpSet{Fields: []Field{FieldMark}, Neg: true, Set: "marks"}, Verdict{Kind: VerdictReturn})),
		add(rule("services", "", Cmp{Field: FieldDaddr, Value: v(a2)}, Verdict{Kind: VerdictContinue})),
		add(rule("svc-x/ns/web/tcp/http", "ns/web:http", Cmp{Field: FieldSaddr, Value: v(src)}, SetUpdate{Fields: []Field{FieldSaddr}, Set: "aff"},
			SetUpdate{Fields: []Field{FieldSaddr}, Set: "aff", Timeout: time.Hour})),
		add(rule("svc-x/ns/web/tcp/http", "", Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, DNATNumgen{Modulus: 2, Map: "ep-web", WithPort: true})),
		add(rule("svc-x/ns/web/tcp/http", "", DNATNumgen{Modulus: 1, Map: "ep-rtp"})),
		add(rule("svc-x/ns/web/tcp/http", "", Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, DNAT{Addr: ip(a1), Port: 8080})),
		add(rule("svc-x/ns/web/tcp/http", "", DNAT{Addr: ip(a2)})),
		add(rule("nat-postrouting", "", MarkTest{Mask: 0x4000}, Verdict{Kind: VerdictReturn})),
		add(rule("nat-postrouting", "", MarkXor{Bits: 0x4000}, Masquerade{FullyRandom: true})),
		add(rule("nat-postrouting", "hairpin", CtStatus{Mask: CtStatusDNAT}, CmpSet{Fields: []Field{FieldSaddr, FieldDaddr, FieldL4Proto, FieldDport}, Set: "hairpin"}, Masquerade{})),
		add(rule("filter-input", "", CtState{Mask: CtStateInvalid}, drop)),
		add(rule("filter-input", "", CtState{Mask: CtStateNew | CtStateEstablished}, CtStatus{Mask: CtStatusSNAT | CtStatusDNAT}, MarkTest{Mask: 0x8000, NonZero: true}, drop)),
		add(rule("filter-input", "", FibAddrType{Daddr: true}, FibAddrType{Neg: true}, goTo("reject-chain"))),
		add(rule("filter-forward", "", jump("reject-chain"))),
		add(rule("reject-chain", "", Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, Reject{TCPReset: true})),
		add(rule("reject-chain", "no endpoints", Reject{})),
		add(rule("mark-for-masquerade", "", MarkOr{Bits: 0x4000}, accept)),
	}
}

// confEveryExprWant4 is what table ip holds after confEveryExpr(IPv4).
const confEveryExprWant4 = `table ip nftproxy {
	set aff {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3h
	}

	set cluster-ips {
		type ipv4_addr
		elements = {
			198.18.0.1
		}
	}

	map ep-rtp {
		typeof numgen random mod 1 : ip daddr
		elements = {
			0 : 198.18.0.1
		}
	}

	map ep-web {
		typeof numgen random mod 2 : ip daddr . th dport
		elements = {
			0 : 198.18.0.1 . 8080,
			1 : 198.18.0.2 . 8080
		}
	}

	set hairpin {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service
	}

	set marks {
		type mark
		elements = {
			0x00004000
		}
	}

	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		flags interval
		comment "dispatch"
		elements = {
			198.18.0.1 . tcp . 80 : goto svc-x/ns/web/tcp/http
		}
	}

	chain filter-forward {
		type filter hook forward priority -10; policy drop;
		jump reject-chain
	}

	chain filter-input {
		type filter hook input priority 0; policy accept;
		ct state invalid drop
		ct state established,new ct status snat,dnat meta mark & 0x00008000 != 0x00000000 drop
		fib daddr type local fib saddr type != local goto reject-chain
	}

	chain mark-for-masquerade {
		meta mark set meta mark | 0x00004000 accept
	}

	chain nat-postrouting {
		type nat hook postrouting priority 100; policy accept;
		meta mark & 0x00004000 == 0x00000000 return
		meta mark set meta mark ^ 0x00004000 masquerade fully-random
		ct status dnat ip saddr . ip daddr . meta l4proto . th dport @hairpin masquerade comment "hairpin"
	}

	chain nat-prerouting {
		type nat hook prerouting priority -100; policy accept;
		ip daddr . meta l4proto . th dport vmap @service-ips comment "dispatch"
		meta l4proto udp th dport != 53 th sport 1024 meta mark != 0x00008000 jump services
	}

	chain reject-chain {
		meta l4proto tcp reject with tcp reset
		reject comment "no endpoints"
	}

	chain services {
		ip daddr @cluster-ips ip saddr != 198.18.0.0/15 meta mark set meta mark | 0x00004000 comment "cluster traffic"
		ip daddr 198.18.0.0/15 meta mark != @marks return
		ip daddr 198.18.0.2 continue
	}

	chain svc-x/ns/web/tcp/http {
		ip saddr 198.18.5.5 update @aff { ip saddr } update @aff { ip saddr timeout 1h } comment "ns/web:http"
		meta l4proto tcp dnat ip to numgen random mod 2 map @ep-web
		dnat to numgen random mod 1 map @ep-rtp
		meta l4proto tcp dnat to 198.18.0.1:8080
		dnat to 198.18.0.2
	}
}
`

// confEveryExprWant6 is the same table in ip6: the family, its address type and the addresses
// confEveryExpr(IPv6) uses (an IPv6 address with a port is bracketed).
var confEveryExprWant6 = strings.NewReplacer(
	"table ip ", "table ip6 ",
	"ipv4_addr", "ipv6_addr",
	"ip daddr", "ip6 daddr",
	"ip saddr", "ip6 saddr",
	"dnat ip to", "dnat ip6 to",
	"198.18.0.1:8080", "[fd00::1]:8080",
	"198.18.0.1", "fd00::1",
	"198.18.0.2", "fd00::2",
	"198.18.0.0/15", "fd00::/16",
	"198.18.5.5", "fd00::5:5",
).Replace(confEveryExprWant4)

func confRuleCases() []confCase {
	t6 := confTables[1]
	every6 := append([]confBuild{on(t6)}, confEveryExpr(IPv6)...)
	return []confCase{
		{name: "rule/every-expression-ip", steps: []confStep{{ops: confEveryExpr(IPv4), want: confEveryExprWant4}}},
		{name: "rule/every-expression-ip6", steps: []confStep{{ops: every6, want: confEveryExprWant6}}},
		{name: "rule/unknown-is-never-sent", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("a")), add(rule("a", "", Unknown{Description: "someone else's"}))}, err: fail("invalid", 2), want: ""},
		}},
		{name: "rule/handles-and-delete", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("a")), add(rule("a", "one", accept)), add(rule("a", "two", drop)), add(rule("a", "three", accept))},
				want:  "table ip nftproxy {\n\tchain a {\n\t\taccept comment \"one\"\n\t\tdrop comment \"two\"\n\t\taccept comment \"three\"\n\t}\n}\n",
				check: confIncreasingHandles},
			{ops: []confBuild{delRule("a", "two")}, want: "table ip nftproxy {\n\tchain a {\n\t\taccept comment \"one\"\n\t\taccept comment \"three\"\n\t}\n}\n"},
			{ops: []confBuild{add(rule("a", "four", drop))}, want: "table ip nftproxy {\n\tchain a {\n\t\taccept comment \"one\"\n\t\taccept comment \"three\"\n\t\tdrop comment \"four\"\n\t}\n}\n",
				check: confIncreasingHandles},
			{ops: []confBuild{del(&Rule{Chain: "a", Handle: 1 << 40})}, err: fail("notfound", 0), want: confSame},
			{ops: []confBuild{delRule("a", "one"), delRule("a", "one")}, err: fail("notfound", 1), want: confSame},
			{ops: []confBuild{del(&Rule{Chain: "nosuch", Handle: 1})}, err: fail("notfound", 0), want: confSame},
			{ops: []confBuild{flush(rule("a", "", accept))}, err: fail("invalid", 0), want: confSame},
		}},
		{name: "rule/missing-references", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("a")), add(base("filter-input", ChainTypeFilter, HookInput, 0))},
				want: "table ip nftproxy {\n\tchain a {\n\t}\n\n\tchain filter-input {\n\t\ttype filter hook input priority 0; policy accept;\n\t}\n}\n"},
			{ops: []confBuild{add(ch("b")), add(rule("nosuch", "", accept))}, err: fail("notfound", 1), want: confSame},
			{ops: []confBuild{add(ch("b")), add(rule("a", "", jump("nosuch")))}, err: fail("notfound", 1), want: confSame},
			{ops: []confBuild{add(ch("b")), add(rule("a", "", goTo("nosuch")))}, err: fail("notfound", 1), want: confSame},
			{ops: []confBuild{add(ch("b")), add(rule("a", "", CmpSet{Fields: []Field{FieldDaddr}, Set: "nosuch"}))}, err: fail("notfound", 1), want: confSame},
			{ops: []confBuild{add(ch("b")), add(rule("a", "", VMap{Fields: []Field{FieldDaddr}, Map: "nosuch"}))}, err: fail("notfound", 1), want: confSame},
			{ops: []confBuild{add(ch("b")), add(rule("a", "", DNATNumgen{Modulus: 2, Map: "nosuch"}))}, err: fail("notfound", 1), want: confSame},
			{ops: []confBuild{add(ch("b")), add(rule("a", "", SetUpdate{Fields: []Field{FieldSaddr}, Set: "nosuch"}))}, err: fail("notfound", 1), want: confSame},
			{ops: []confBuild{add(ch("b")), add(rule("a", "", jump("filter-input")))}, err: fail("operation not supported", 1), want: confSame},
			{ops: []confBuild{add(&Set{Name: "s", Key: []Type{TypeIPv4Addr}}), add(rule("a", "", SetUpdate{Fields: []Field{FieldSaddr}, Set: "s", Timeout: time.Hour}))},
				err: fail("operation not supported", 1), want: confSame},
		}},
		{name: "rule/what-base-chains-reach", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(base("pre", ChainTypeNAT, HookPrerouting, -100)), add(base("post", ChainTypeNAT, HookPostrouting, 100)),
				add(base("in", ChainTypeFilter, HookInput, 0)), add(ch("d")), add(rule("d", "", DNAT{Addr: ip("198.18.0.9")})),
				add(ch("r")), add(rule("r", "", Reject{})), add(&Set{Name: "vm", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeVerdict}}),
				add(rule("in", "", VMap{Fields: []Field{FieldDaddr}, Map: "vm"})), add(rule("pre", "", jump("d")))},
				want: baseChainsReach},
			{ops: []confBuild{add(rule("pre", "", Masquerade{}))}, err: fail("operation not supported", 0), want: confSame},
			{ops: []confBuild{add(ch("x")), add(rule("in", "", jump("d")))}, err: fail("operation not supported", 1), want: confSame},
			{ops: []confBuild{add(ch("x")), add(velem("vm", goTo("d"), v("198.18.0.1")))}, err: fail("operation not supported", 1), want: confSame},
			{ops: []confBuild{add(rule("post", "", jump("r")))}, err: fail("operation not supported", 0), want: confSame},
			{ops: []confBuild{add(rule("in", "", goTo("r"))), add(velem("vm", jump("r"), v("198.18.0.1")))}, want: strings.NewReplacer(
				"type ipv4_addr : verdict\n", "type ipv4_addr : verdict\n\t\telements = {\n\t\t\t198.18.0.1 : jump r\n\t\t}\n",
				"ip daddr vmap @vm\n", "ip daddr vmap @vm\n\t\tgoto r\n").Replace(baseChainsReach)},
		}},
		{name: "rule/jump-depth-and-loops", steps: []confStep{
			{ops: confChainLadder(17), want: confLadderText(17, "")},
			// in -> c03 -> ... -> c17: 15 jumps deep is allowed; from c02 it is 16, refused.
			{ops: []confBuild{add(rule("in", "", jump("c02")))}, err: fail("too many links", 0), want: confSame},
			{ops: []confBuild{add(rule("in", "", jump("c03")))}, want: confLadderText(17, "c03")},
			{ops: []confBuild{add(rule("c17", "", jump("c03")))}, err: fail("too many links", 0), want: confSame},
			// A loop through a verdict map, and through a plain lookup in a verdict map, which the
			// kernel also follows.
			{ops: []confBuild{add(&Set{Name: "vm", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeVerdict}}),
				add(rule("c16", "", VMap{Fields: []Field{FieldDaddr}, Map: "vm"})), add(velem("vm", goTo("c15"), v("198.18.0.1")))},
				err: fail("too many links", 2), want: confSame},
			{ops: []confBuild{add(&Set{Name: "vm", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeVerdict}}),
				add(velem("vm", goTo("c16"), v("198.18.0.1"))), add(rule("c16", "", CmpSet{Fields: []Field{FieldDaddr}, Neg: true, Set: "vm"}))},
				err: fail("too many links", 2), want: confSame},
		}},
	}
}

// confChainLadder makes a filter input chain "in" and chains c1..cn, each ci jumping to ci+1.
func confChainLadder(n int) []confBuild {
	out := []confBuild{add(&TableObj{}), add(base("in", ChainTypeFilter, HookInput, 0))}
	for i := 1; i <= n; i++ {
		out = append(out, add(ch(confLadder(i))))
	}
	for i := 1; i < n; i++ {
		out = append(out, add(rule(confLadder(i), "", jump(confLadder(i+1)))))
	}
	return out
}

func confLadder(i int) string { return fmt.Sprintf("c%02d", i) }

// confLadderText is how nft lists the ladder confChainLadder(n) builds, with the input chain
// jumping to inJump when it is not empty.
func confLadderText(n int, inJump string) string {
	var b strings.Builder
	b.WriteString("table ip nftproxy {\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "\tchain %s {\n", confLadder(i))
		if i < n {
			fmt.Fprintf(&b, "\t\tjump %s\n", confLadder(i+1))
		}
		b.WriteString("\t}\n\n")
	}
	b.WriteString("\tchain in {\n\t\ttype filter hook input priority 0; policy accept;\n")
	if inJump != "" {
		fmt.Fprintf(&b, "\t\tjump %s\n", inJump)
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}

// confIncreasingHandles checks that the kernel numbered the rules of each chain in order.
func confIncreasingHandles(t *testing.T, k Interface) {
	t.Helper()
	rs, err := k.Dump(context.Background(), confTables[0])
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]uint64{}
	for _, r := range rs.Rules {
		if r.Handle == 0 || r.Handle <= last[r.Chain] {
			t.Fatalf("rule %q in chain %s: got handle %d after %d, want increasing non-zero handles", r.Comment, r.Chain, r.Handle, last[r.Chain])
		}
		last[r.Chain] = r.Handle
	}
}

// baseChainsReach is the table of the rule/what-base-chains-reach case before its last step.
const baseChainsReach = `table ip nftproxy {
	map vm {
		type ipv4_addr : verdict
	}

	chain d {
		dnat to 198.18.0.9
	}

	chain in {
		type filter hook input priority 0; policy accept;
		ip daddr vmap @vm
	}

	chain post {
		type nat hook postrouting priority 100; policy accept;
	}

	chain pre {
		type nat hook prerouting priority -100; policy accept;
		jump d
	}

	chain r {
		reject
	}
}
`
