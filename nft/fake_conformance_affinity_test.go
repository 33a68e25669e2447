package nft

import "time"

// confAffinityCases cover the shapes of ClientIP session affinity: one dynamic timeout set per
// endpoint, a sticky rule that refreshes and reuses it, and a chain of numgen matches that picks
// an endpoint uniformly and records the choice in that endpoint's set.
func confAffinityCases() []confCase {
	affKey := []Type{TypeIPv4Addr, TypeIPv4Addr, TypeInetProto, TypeInetService}
	affFields := []Field{FieldSaddr, FieldDaddr, FieldL4Proto, FieldDport}
	ctFront := []Field{FieldCtOrigDaddr, FieldL4Proto, FieldCtOrigProtoDst}
	ctKey := []Field{FieldSaddr, FieldCtOrigDaddr, FieldL4Proto, FieldCtOrigProtoDst}
	ctEndpoint := []Field{FieldCtReplySaddr, FieldCtReplyProtoSrc}
	ep := func(name string) *Set {
		return &Set{Name: name, Key: []Type{TypeIPv4Addr}, Dynamic: true, Timeout: 3 * time.Second, Comment: "ns/web/tcp/http"}
	}
	sticky := func(set, addr string) *Rule {
		return rule("svc", "", CmpSet{Fields: []Field{FieldSaddr}, Set: set}, SetUpdate{Fields: []Field{FieldSaddr}, Set: set},
			Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, DNAT{Addr: ip(addr), Port: 8080})
	}
	return []confCase{
		{name: "rule/affinity-numgen-match", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(base("nat-prerouting", ChainTypeNAT, HookPrerouting, -100)), add(ch("svc")),
				add(ep("aff-a")), add(ep("aff-b")),
				add(rule("nat-prerouting", "", jump("svc"))),
				add(sticky("aff-a", "198.18.0.1")), add(sticky("aff-b", "198.18.0.2")),
				add(rule("svc", "", NumgenMatch{Modulus: 2, Value: 0}, SetUpdate{Fields: []Field{FieldSaddr}, Set: "aff-a"},
					Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, DNAT{Addr: ip("198.18.0.1"), Port: 8080})),
				add(rule("svc", "", SetUpdate{Fields: []Field{FieldSaddr}, Set: "aff-b"}, DNAT{Addr: ip("198.18.0.2")})),
				add(rule("svc", "never", NumgenMatch{Modulus: 3, Value: 2}, Verdict{Kind: VerdictReturn})),
			},
				want: `table ip nftproxy {
	set aff-a {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3s
		comment "ns/web/tcp/http"
	}

	set aff-b {
		type ipv4_addr
		size 65535
		flags dynamic,timeout
		timeout 3s
		comment "ns/web/tcp/http"
	}

	chain nat-prerouting {
		type nat hook prerouting priority -100; policy accept;
		jump svc
	}

	chain svc {
		ip saddr @aff-a update @aff-a { ip saddr } meta l4proto tcp dnat to 198.18.0.1:8080
		ip saddr @aff-b update @aff-b { ip saddr } meta l4proto tcp dnat to 198.18.0.2:8080
		numgen random mod 2 0 update @aff-a { ip saddr } meta l4proto tcp dnat to 198.18.0.1:8080
		update @aff-b { ip saddr } dnat to 198.18.0.2
		numgen random mod 3 2 return comment "never"
	}
}
`},
			{ops: []confBuild{add(rule("svc", "", NumgenMatch{Modulus: 0}))}, err: fail("numerical result out of range", 0), want: confSame},
		}},
		{name: "rule/affinity-shared-map", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(base("nat-prerouting", ChainTypeNAT, HookPrerouting, -100)), add(ch("hit")), add(ch("svc")),
				add(&Set{Name: "affinity", Key: affKey, Data: []Type{TypeIPv4Addr, TypeInetService}, Dynamic: true, HasTimeout: true, Size: 1 << 20}),
				add(&Set{Name: "affinity-addr", Key: affKey, Data: []Type{TypeIPv4Addr}, Dynamic: true, HasTimeout: true}),
				add(&Set{Name: "plain", Key: []Type{TypeIPv4Addr}, Dynamic: true, HasTimeout: true, Size: 16}),
				add(rule("nat-prerouting", "", jump("svc"))),
				add(rule("hit", "", CmpSet{Fields: affFields, Set: "affinity"},
					SetUpdate{Fields: affFields, Set: "affinity", Timeout: 3 * time.Second, Data: []Value{v("0.0.0.0"), Port(0)}},
					DNATMap{Fields: affFields, Map: "affinity", WithPort: true})),
				add(rule("svc", "", jump("hit"))),
				add(rule("svc", "", NumgenMatch{Modulus: 2, Value: 0}, Cmp{Field: FieldL4Proto, Value: Proto(tcp)},
					SetUpdate{Fields: affFields, Set: "affinity", Timeout: 3 * time.Second, Data: []Value{v("198.18.0.1"), Port(8080)}},
					DNAT{Addr: ip("198.18.0.1"), Port: 8080})),
				add(rule("svc", "", SetUpdate{Fields: affFields, Set: "affinity-addr", Timeout: 3 * time.Second, Data: []Value{v("198.18.0.2")}},
					DNAT{Addr: ip("198.18.0.2")})),
			},
				want: `table ip nftproxy {
	map affinity {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service
		size 1048576
		flags dynamic,timeout
	}

	map affinity-addr {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service : ipv4_addr
		size 65535
		flags dynamic,timeout
	}

	set plain {
		type ipv4_addr
		size 16
		flags dynamic,timeout
	}

	chain hit {
		ip saddr . ip daddr . meta l4proto . th dport @affinity update @affinity { ip saddr . ip daddr . meta l4proto . th dport timeout 3s : 0.0.0.0 . 0 } dnat ip to ip saddr . ip daddr . meta l4proto . th dport map @affinity
	}

	chain nat-prerouting {
		type nat hook prerouting priority -100; policy accept;
		jump svc
	}

	chain svc {
		jump hit
		numgen random mod 2 0 meta l4proto tcp update @affinity { ip saddr . ip daddr . meta l4proto . th dport timeout 3s : 198.18.0.1 . 8080 } dnat to 198.18.0.1:8080
		update @affinity-addr { ip saddr . ip daddr . meta l4proto . th dport timeout 3s : 198.18.0.2 } dnat to 198.18.0.2
	}
}
`},
			// A data map needs data in an update; a plain set takes none.
			{ops: []confBuild{add(rule("svc", "", SetUpdate{Fields: affFields, Set: "affinity"}))}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(rule("svc", "", SetUpdate{Fields: []Field{FieldSaddr}, Set: "plain", Data: []Value{v("198.18.0.1")}}))},
				err: fail("invalid", 0), want: confSame},
			// dnat from a map: it must exist and hold data.
			{ops: []confBuild{add(rule("svc", "", DNATMap{Fields: affFields, Map: "nosuch"}))}, err: fail("notfound", 0), want: confSame},
			{ops: []confBuild{add(rule("svc", "", DNATMap{Fields: []Field{FieldSaddr}, Map: "plain"}))}, err: fail("invalid", 0), want: confSame},
		}},
		// The recording after DNAT: a verdict map of sticky frontends keyed by the connection's
		// original tuple, an update whose data is read from the reply tuple (the endpoint).
		{name: "rule/affinity-post-dnat", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(base("filter-output", ChainTypeFilter, HookOutput, -90)), add(ch("record")),
				add(&Set{Name: "affinity", Key: affKey, Data: []Type{TypeIPv4Addr, TypeInetService}, Dynamic: true, HasTimeout: true, Size: 1024}),
				add(&Set{Name: "sticky", Key: affKey[1:], Data: []Type{TypeVerdict}}),
				add(&Set{Name: "plain", Key: []Type{TypeIPv4Addr}, Dynamic: true, HasTimeout: true, Size: 16}),
				add(&Element{Set: "sticky", Key: []Value{v("198.18.0.10"), Proto(tcp), Port(80)}, Verdict: &Verdict{Kind: VerdictGoto, Chain: "record"}}),
				add(rule("filter-output", "", Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, VMap{Fields: ctFront, Map: "sticky"})),
				add(rule("record", "", CtState{Mask: CtStateNew}, Cmp{Field: FieldL4Proto, Value: Proto(tcp)},
					SetUpdate{Fields: ctKey, Set: "affinity", Timeout: 3 * time.Hour, DataFields: ctEndpoint})),
			},
				want: `table ip nftproxy {
	map affinity {
		type ipv4_addr . ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service
		size 1024
		flags dynamic,timeout
	}

	set plain {
		type ipv4_addr
		size 16
		flags dynamic,timeout
	}

	map sticky {
		type ipv4_addr . inet_proto . inet_service : verdict
		elements = {
			198.18.0.10 . tcp . 80 : goto record
		}
	}

	chain filter-output {
		type filter hook output priority -90; policy accept;
		meta l4proto tcp ct original ip daddr . meta l4proto . ct original proto-dst vmap @sticky
	}

	chain record {
		ct state new meta l4proto tcp update @affinity { ip saddr . ct original ip daddr . meta l4proto . ct original proto-dst timeout 3h : ct reply ip saddr . ct reply proto-src }
	}
}
`},
			// Data fields need a data map whose data they fill exactly.
			{ops: []confBuild{add(rule("record", "", SetUpdate{Fields: []Field{FieldSaddr}, Set: "plain", DataFields: []Field{FieldCtReplySaddr}}))},
				err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(rule("record", "", SetUpdate{Fields: ctKey, Set: "affinity", DataFields: []Field{FieldCtReplySaddr}}))},
				err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(rule("record", "", SetUpdate{Fields: ctKey, Set: "affinity", DataFields: ctEndpoint, Data: []Value{v("198.18.0.1"), Port(80)}}))},
				err: fail("invalid", 0), want: confSame},
		}},
	}
}
