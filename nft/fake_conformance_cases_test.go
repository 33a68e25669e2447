package nft

import (
	"net/netip"
	"time"
)

// Builders for the conformance cases. Addresses: 198.18.0.0/15 and fd00::/8 only.

func add(o Object) confBuild   { return func(tx *Transaction, _ *confCtx) { tx.Add(o) } }
func del(o Object) confBuild   { return func(tx *Transaction, _ *confCtx) { tx.Delete(o) } }
func flush(o Object) confBuild { return func(tx *Transaction, _ *confCtx) { tx.Flush(o) } }

// on switches the transaction to table t for the following builders.
func on(t Table) confBuild { return func(tx *Transaction, _ *confCtx) { tx.Table = t } }

// delRule deletes the rule with comment in chain, by the handle the kernel gave it.
func delRule(chain, comment string) confBuild {
	return func(tx *Transaction, c *confCtx) {
		tx.Delete(&Rule{Chain: chain, Handle: c.handle(tx.Table, chain, comment)})
	}
}

func fail(class string, index int) *confErr { return &confErr{class: class, index: index} }

func ch(name string) *Chain { return &Chain{Name: name} }

func base(name string, typ ChainType, hook Hook, prio int32) *Chain {
	return &Chain{Name: name, Base: &BaseChain{Type: typ, Hook: hook, Priority: prio}}
}

func rule(chain, comment string, exprs ...Expr) *Rule {
	return &Rule{Chain: chain, Comment: comment, Exprs: exprs}
}

func ip(s string) netip.Addr           { return netip.MustParseAddr(s) }
func confPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func v(s string) Value                 { return Addr(ip(s)) }
func key(vs ...Value) []Value {
	return vs
}

func elem(set string, k ...Value) *Element { return &Element{Set: set, Key: k} }

func velem(set string, verdict Verdict, k ...Value) *Element {
	return &Element{Set: set, Key: k, Verdict: &verdict}
}

func goTo(chain string) Verdict { return Verdict{Kind: VerdictGoto, Chain: chain} }
func jump(chain string) Verdict { return Verdict{Kind: VerdictJump, Chain: chain} }

var (
	accept = Verdict{Kind: VerdictAccept}
	drop   = Verdict{Kind: VerdictDrop}
)

const (
	tcp = 6
	udp = 17
)

// confSetIPs is the dispatch map: "ip daddr . meta l4proto . th dport : verdict", intervals.
func confSetIPs(name string, f Family) *Set {
	return &Set{Name: name, Key: []Type{f.AddrType(), TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict}, Interval: true}
}

func confCases() []confCase {
	var cases []confCase
	cases = append(cases, confObjectCases()...)
	cases = append(cases, confElementCases()...)
	cases = append(cases, confRuleCases()...)
	cases = append(cases, confTxCases()...)
	cases = append(cases, confAffinityCases()...)
	cases = append(cases, confNumgenKeyCases()...)
	cases = append(cases, confSocketCases()...)
	return cases
}

const confEmpty4 = "table ip nftproxy {\n}\n"

func confObjectCases() []confCase {
	t4, t6 := confTables[0], confTables[1]
	return []confCase{
		{name: "table/add-delete", steps: []confStep{
			{ops: []confBuild{add(&TableObj{})}, want: confEmpty4},
			{ops: []confBuild{add(&TableObj{}), add(&TableObj{})}, want: confSame},
			{ops: []confBuild{add(ch("a")), on(t6), add(ch("a"))}, err: fail("notfound", 1), want: confSame},
			{ops: []confBuild{del(&TableObj{})}, want: ""},
			{ops: []confBuild{del(&TableObj{})}, err: fail("notfound", 0), want: ""},
			{ops: []confBuild{add(&TableObj{}), flush(&TableObj{})}, err: fail("invalid", 1), want: ""},
			{ops: []confBuild{on(t6), add(&TableObj{}), on(t4), add(&TableObj{})}, want: confEmpty4 + "table ip6 nftproxy {\n}\n"},
		}},
		{name: "table/delete-removes-everything", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(base("pre", ChainTypeNAT, HookPrerouting, -100)), add(ch("svc")),
				add(confSetIPs("service-ips", IPv4)), add(velem("service-ips", goTo("svc"), v("198.19.0.10"), Proto(tcp), Port(80))),
				add(rule("pre", "dispatch", VMap{Fields: []Field{FieldDaddr, FieldL4Proto, FieldDport}, Map: "service-ips"})),
				add(rule("svc", "", DNAT{Addr: ip("198.18.1.1")}))}, want: `table ip nftproxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		flags interval
		elements = {
			198.19.0.10 . tcp . 80 : goto svc
		}
	}

	chain pre {
		type nat hook prerouting priority -100; policy accept;
		ip daddr . meta l4proto . th dport vmap @service-ips comment "dispatch"
	}

	chain svc {
		dnat to 198.18.1.1
	}
}
`},
			{ops: []confBuild{del(&TableObj{})}, want: ""},
			{ops: []confBuild{add(&TableObj{})}, want: confEmpty4},
		}},
		{name: "chain/add-again-and-change", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(base("pre", ChainTypeNAT, HookPrerouting, -100)), add(ch("reg"))},
				want: "table ip nftproxy {\n\tchain pre {\n\t\ttype nat hook prerouting priority -100; policy accept;\n\t}\n\n\tchain reg {\n\t}\n}\n"},
			// Adding an identical chain, or a regular chain over any chain, changes nothing.
			{ops: []confBuild{add(base("pre", ChainTypeNAT, HookPrerouting, -100)), add(ch("reg")), add(ch("pre"))}, want: confSame},
			// The policy of a base chain can change in place.
			{ops: []confBuild{add(&Chain{Name: "pre", Base: &BaseChain{Type: ChainTypeNAT, Hook: HookPrerouting, Priority: -100, Policy: PolicyDrop}})},
				want: "table ip nftproxy {\n\tchain pre {\n\t\ttype nat hook prerouting priority -100; policy drop;\n\t}\n\n\tchain reg {\n\t}\n}\n"},
			{ops: []confBuild{add(ch("x")), add(base("pre", ChainTypeFilter, HookPrerouting, -100))}, err: fail("exists", 1), want: confSame},
			{ops: []confBuild{add(ch("x")), add(base("pre", ChainTypeNAT, HookPostrouting, -100))}, err: fail("operation not supported", 1), want: confSame},
			{ops: []confBuild{add(ch("x")), add(base("pre", ChainTypeNAT, HookPrerouting, 0))}, err: fail("operation not supported", 1), want: confSame},
			{ops: []confBuild{add(base("reg", ChainTypeFilter, HookInput, 0))}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{add(base("fwd", ChainTypeNAT, HookForward, 0))}, err: fail("operation not supported", 0), want: confSame},
			{ops: []confBuild{add(base("early", ChainTypeNAT, HookPrerouting, -200))}, err: fail("operation not supported", 0), want: confSame},
		}},
		{name: "chain/flush-delete", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("a")), add(rule("a", "one", accept)), add(rule("a", "two", drop))},
				want: "table ip nftproxy {\n\tchain a {\n\t\taccept comment \"one\"\n\t\tdrop comment \"two\"\n\t}\n}\n"},
			{ops: []confBuild{flush(ch("a"))}, want: "table ip nftproxy {\n\tchain a {\n\t}\n}\n"},
			{ops: []confBuild{add(rule("a", "three", accept))}, want: "table ip nftproxy {\n\tchain a {\n\t\taccept comment \"three\"\n\t}\n}\n"},
			// A chain deleted with rules in it loses them (the kernel deletes recursively).
			{ops: []confBuild{del(ch("a"))}, want: confEmpty4},
			{ops: []confBuild{del(ch("a"))}, err: fail("notfound", 0), want: confSame},
			{ops: []confBuild{flush(ch("a"))}, err: fail("notfound", 0), want: confSame},
		}},
		{name: "chain/busy-while-referenced", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("a")), add(ch("b")), add(ch("c")),
				add(rule("a", "to-b", jump("b"))),
				add(&Set{Name: "m", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeVerdict}}),
				add(velem("m", goTo("c"), v("198.18.0.1")))},
				want: "table ip nftproxy {\n\tmap m {\n\t\ttype ipv4_addr : verdict\n\t\telements = {\n\t\t\t198.18.0.1 : goto c\n\t\t}\n\t}\n\n\tchain a {\n\t\tjump b comment \"to-b\"\n\t}\n\n\tchain b {\n\t}\n\n\tchain c {\n\t}\n}\n"},
			{ops: []confBuild{del(ch("b"))}, err: fail("busy", 0), want: confSame},
			{ops: []confBuild{del(ch("c"))}, err: fail("busy", 0), want: confSame},
			// The safe way to remove a service chain: drop what points at it in the same batch.
			{ops: []confBuild{del(elem("m", v("198.18.0.1"))), del(ch("c")), delRule("a", "to-b"), del(ch("b"))},
				want: "table ip nftproxy {\n\tmap m {\n\t\ttype ipv4_addr : verdict\n\t}\n\n\tchain a {\n\t}\n}\n"},
			// Flushing the referring chain, or the map, frees the target too.
			{ops: []confBuild{add(ch("b")), add(rule("a", "to-b", goTo("b"))), add(ch("c")), add(velem("m", jump("c"), v("198.18.0.2")))},
				want: "table ip nftproxy {\n\tmap m {\n\t\ttype ipv4_addr : verdict\n\t\telements = {\n\t\t\t198.18.0.2 : jump c\n\t\t}\n\t}\n\n\tchain a {\n\t\tgoto b comment \"to-b\"\n\t}\n\n\tchain b {\n\t}\n\n\tchain c {\n\t}\n}\n"},
			{ops: []confBuild{flush(ch("a")), del(ch("b")), flush(&Set{Name: "m"}), del(ch("c"))},
				want: "table ip nftproxy {\n\tmap m {\n\t\ttype ipv4_addr : verdict\n\t}\n\n\tchain a {\n\t}\n}\n"},
		}},
		{name: "set/add-again-flush-delete", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(&Set{Name: "s", Key: []Type{TypeIPv4Addr}, Comment: "first"}),
				add(elem("s", v("198.18.0.2"))), add(elem("s", v("198.18.0.1")))},
				want: "table ip nftproxy {\n\tset s {\n\t\ttype ipv4_addr\n\t\tcomment \"first\"\n\t\telements = {\n\t\t\t198.18.0.1,\n\t\t\t198.18.0.2\n\t\t}\n\t}\n}\n"},
			// Adding it again, even with another comment, keeps the set, its comment and elements.
			{ops: []confBuild{add(&Set{Name: "s", Key: []Type{TypeIPv4Addr}, Comment: "second"})}, want: confSame},
			{ops: []confBuild{add(&Set{Name: "s", Key: []Type{TypeIPv4Addr, TypeInetService}})}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{add(&Set{Name: "s", Key: []Type{TypeIPv4Addr}, Interval: true})}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{add(&Set{Name: "s", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeVerdict}})}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{flush(&Set{Name: "s"})}, want: "table ip nftproxy {\n\tset s {\n\t\ttype ipv4_addr\n\t\tcomment \"first\"\n\t}\n}\n"},
			{ops: []confBuild{del(&Set{Name: "s"})}, want: confEmpty4},
			{ops: []confBuild{del(&Set{Name: "s"})}, err: fail("notfound", 0), want: confSame},
			{ops: []confBuild{flush(&Set{Name: "s"})}, err: fail("notfound", 0), want: confSame},
		}},
		{name: "set/busy-while-used-by-a-rule", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("a")),
				add(&Set{Name: "s", Key: []Type{TypeIPv4Addr}}),
				add(&Set{Name: "vm", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeVerdict}}),
				add(&Set{Name: "aff", Key: []Type{TypeIPv4Addr}, Dynamic: true, Timeout: 3 * time.Hour}),
				add(&Set{Name: "ep", Key: []Type{TypeInteger}, Data: []Type{TypeIPv4Addr}, NumgenKey: 2}),
				add(rule("a", "s", CmpSet{Fields: []Field{FieldSaddr}, Set: "s"}, accept)),
				add(rule("a", "vm", VMap{Fields: []Field{FieldDaddr}, Map: "vm"})),
				add(rule("a", "aff", SetUpdate{Fields: []Field{FieldSaddr}, Set: "aff"})),
				add(rule("a", "ep", DNATNumgen{Modulus: 2, Map: "ep"}))},
				want: `table ip nftproxy {
	set aff {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3h
	}

	map ep {
		typeof numgen random mod 2 : ip daddr
	}

	set s {
		type ipv4_addr
	}

	map vm {
		type ipv4_addr : verdict
	}

	chain a {
		ip saddr @s accept comment "s"
		ip daddr vmap @vm comment "vm"
		update @aff { ip saddr } comment "aff"
		dnat to numgen random mod 2 map @ep comment "ep"
	}
}
`},
			{ops: []confBuild{add(ch("b")), del(&Set{Name: "s"})}, err: fail("busy", 1), want: confSame},
			{ops: []confBuild{del(&Set{Name: "vm"})}, err: fail("busy", 0), want: confSame},
			{ops: []confBuild{del(&Set{Name: "aff"})}, err: fail("busy", 0), want: confSame},
			{ops: []confBuild{del(&Set{Name: "ep"})}, err: fail("busy", 0), want: confSame},
			{ops: []confBuild{delRule("a", "s"), del(&Set{Name: "s"}), delRule("a", "vm"), del(&Set{Name: "vm"}),
				delRule("a", "aff"), del(&Set{Name: "aff"}), delRule("a", "ep"), del(&Set{Name: "ep"})}, want: `table ip nftproxy {
	chain a {
	}
}
`},
		}},
	}
}
