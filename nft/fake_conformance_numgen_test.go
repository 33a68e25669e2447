package nft

import "strings"

// confNumgenKeyCases cover the shared endpoint maps of the frontend-keyed layout: a map keyed by
// "daddr . l4proto . dport . slot" (address frontends) and one keyed by "l4proto . dport . slot"
// (node ports), in both families, with the one-rule pick chains that DNAT through them.
func confNumgenKeyCases() []confCase {
	maps := func(f Family, a1, a2, e1, e2 string) []confBuild {
		addr := f.AddrType()
		return []confBuild{
			add(&TableObj{}), add(base("nat-prerouting", ChainTypeNAT, HookPrerouting, -100)),
			add(ch("pick-2")), add(ch("pick-nodeport-2")), add(ch("pick-addr-1")),
			add(&Set{Name: "endpoints", Key: []Type{addr, TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{addr, TypeInetService}, NumgenKey: 1}),
			add(&Set{Name: "nodeport-endpoints", Key: []Type{TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{addr, TypeInetService}, NumgenKey: 1}),
			add(&Set{Name: "addr-endpoints", Key: []Type{addr, TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{addr}, NumgenKey: 3, Comment: "keeps the port"}),
			add(&Element{Set: "endpoints", Key: key(v(a1), Proto(tcp), Port(80), Int(0)), Data: key(v(e1), Port(8080))}),
			add(&Element{Set: "endpoints", Key: key(v(a1), Proto(tcp), Port(80), Int(1)), Data: key(v(e2), Port(8080))}),
			add(&Element{Set: "endpoints", Key: key(v(a2), Proto(udp), Port(53), Int(0)), Data: key(v(e2), Port(5353)), Comment: "ns/dns:dns"}),
			add(&Element{Set: "nodeport-endpoints", Key: key(Proto(tcp), Port(30080), Int(0)), Data: key(v(e1), Port(8080))}),
			add(&Element{Set: "nodeport-endpoints", Key: key(Proto(tcp), Port(30080), Int(1)), Data: key(v(e2), Port(8080))}),
			add(&Element{Set: "addr-endpoints", Key: key(v(a2), Proto(132), Port(9), Int(0)), Data: key(v(e1))}),
			add(rule("nat-prerouting", "", jump("pick-2"))), add(rule("nat-prerouting", "", jump("pick-nodeport-2"))),
			add(rule("nat-prerouting", "", jump("pick-addr-1"))),
			add(rule("pick-2", "", DNATNumgen{Modulus: 2, Map: "endpoints", WithPort: true, Key: DNATNumgenKeyAddr})),
			add(rule("pick-nodeport-2", "", DNATNumgen{Modulus: 2, Map: "nodeport-endpoints", WithPort: true, Key: DNATNumgenKeyPort})),
			add(rule("pick-addr-1", "sctp", DNATNumgen{Modulus: 1, Map: "addr-endpoints", Key: DNATNumgenKeyAddr})),
		}
	}
	return []confCase{
		{name: "rule/numgen-keyed-maps", steps: []confStep{
			{ops: maps(IPv4, "198.18.0.1", "198.18.0.2", "198.19.0.1", "198.19.0.2"), want: confNumgenWant4},
			{ops: append([]confBuild{on(confTables[1])}, maps(IPv6, "fd00::1", "fd00::2", "fd00::1:1", "fd00::1:2")...), want: confNumgenWant4 + confNumgenWant6},
			// Deleting one slot and the rules that use a map, then the map.
			{ops: []confBuild{del(&Element{Set: "endpoints", Key: key(v("198.18.0.1"), Proto(tcp), Port(80), Int(1))}),
				delRule("pick-addr-1", "sctp"), del(&Set{Name: "addr-endpoints"})}, want: confNumgenWant4b + confNumgenWant6},
			// A key nothing encodes, and a keyed numgen on an interval map, are refused before sending.
			{ops: []confBuild{add(rule("pick-2", "", DNATNumgen{Modulus: 2, Map: "endpoints", WithPort: true, Key: []Field{FieldSaddr, FieldL4Proto, FieldDport}}))},
				err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(&Set{Name: "iv", Key: []Type{TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{TypeIPv4Addr}, Interval: true}),
				add(rule("pick-2", "", DNATNumgen{Modulus: 2, Map: "iv", Key: DNATNumgenKeyPort}))}, err: fail("invalid", 1), want: confSame},
		}},
	}
}

const confNumgenWant4 = `table ip nftproxy {
	map addr-endpoints {
		typeof ip daddr . meta l4proto . th dport . numgen random mod 3 : ip daddr
		comment "keeps the port"
		elements = {
			198.18.0.2 . sctp . 9 . 0 : 198.19.0.1
		}
	}

	map endpoints {
		typeof ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport
		elements = {
			198.18.0.1 . tcp . 80 . 0 : 198.19.0.1 . 8080,
			198.18.0.1 . tcp . 80 . 1 : 198.19.0.2 . 8080,
			198.18.0.2 . udp . 53 . 0 comment "ns/dns:dns" : 198.19.0.2 . 5353
		}
	}

	map nodeport-endpoints {
		typeof meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport
		elements = {
			tcp . 30080 . 0 : 198.19.0.1 . 8080,
			tcp . 30080 . 1 : 198.19.0.2 . 8080
		}
	}

	chain nat-prerouting {
		type nat hook prerouting priority -100; policy accept;
		jump pick-2
		jump pick-nodeport-2
		jump pick-addr-1
	}

	chain pick-2 {
		dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 map @endpoints
	}

	chain pick-addr-1 {
		dnat to ip daddr . meta l4proto . th dport . numgen random mod 1 map @addr-endpoints comment "sctp"
	}

	chain pick-nodeport-2 {
		dnat ip to meta l4proto . th dport . numgen random mod 2 map @nodeport-endpoints
	}
}
`

// confNumgenWant4b is confNumgenWant4 after the third step: the addr-endpoints map deleted, slot
// 1 of 198.18.0.1 . tcp . 80 deleted, pick-addr-1 flushed.
var confNumgenWant4b = strings.NewReplacer(
	"\tmap addr-endpoints {\n\t\ttypeof ip daddr . meta l4proto . th dport . numgen random mod 3 : ip daddr\n"+
		"\t\tcomment \"keeps the port\"\n\t\telements = {\n\t\t\t198.18.0.2 . sctp . 9 . 0 : 198.19.0.1\n\t\t}\n\t}\n\n", "",
	"\t\t\t198.18.0.1 . tcp . 80 . 1 : 198.19.0.2 . 8080,\n", "",
	"\t\tdnat to ip daddr . meta l4proto . th dport . numgen random mod 1 map @addr-endpoints comment \"sctp\"\n", "",
).Replace(confNumgenWant4)

// confNumgenWant6 is confNumgenWant4 in the ip6 table, with the addresses maps() gets there.
var confNumgenWant6 = strings.NewReplacer(
	"table ip ", "table ip6 ", "ip daddr", "ip6 daddr", "dnat ip to", "dnat ip6 to",
	"198.18.0.1", "fd00::1", "198.18.0.2", "fd00::2", "198.19.0.1", "fd00::1:1", "198.19.0.2", "fd00::1:2",
).Replace(confNumgenWant4)
