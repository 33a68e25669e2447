package nft

import "time"

func confElementCases() []confCase {
	svcMap := confSetIPs("service-ips", IPv4)
	return []confCase{
		{name: "element/verdict-map", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("svc-a")), add(ch("svc-b")), add(base("pre", ChainTypeNAT, HookPrerouting, -100)),
				add(&Set{Name: "m", Key: []Type{TypeIPv4Addr, TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict}, Comment: "ClusterIP . proto . port"}),
				add(&Element{Set: "m", Key: key(v("198.19.0.10"), Proto(tcp), Port(80)), Verdict: &Verdict{Kind: VerdictGoto, Chain: "svc-a"}, Comment: "ns/a:http"}),
				add(velem("m", drop, v("198.19.0.10"), Proto(udp), Port(53)))},
				want: `table ip nftproxy {
	map m {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP . proto . port"
		elements = {
			198.19.0.10 . tcp . 80 comment "ns/a:http" : goto svc-a,
			198.19.0.10 . udp . 53 : drop
		}
	}

	chain pre {
		type nat hook prerouting priority -100; policy accept;
	}

	chain svc-a {
	}

	chain svc-b {
	}
}
`},
			// Identical again: fine, nothing changes (not even the comment).
			{ops: []confBuild{add(velem("m", goTo("svc-a"), v("198.19.0.10"), Proto(tcp), Port(80)))}, want: confSame},
			{ops: []confBuild{add(velem("m", goTo("svc-b"), v("198.19.0.10"), Proto(tcp), Port(80)))}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{add(velem("m", accept, v("198.19.0.10"), Proto(udp), Port(53)))}, err: fail("exists", 0), want: confSame},
			// A value changes by delete then add, in one transaction.
			{ops: []confBuild{del(elem("m", v("198.19.0.10"), Proto(tcp), Port(80))), add(velem("m", goTo("svc-b"), v("198.19.0.10"), Proto(tcp), Port(80)))},
				want: `table ip nftproxy {
	map m {
		type ipv4_addr . inet_proto . inet_service : verdict
		comment "ClusterIP . proto . port"
		elements = {
			198.19.0.10 . tcp . 80 : goto svc-b,
			198.19.0.10 . udp . 53 : drop
		}
	}

	chain pre {
		type nat hook prerouting priority -100; policy accept;
	}

	chain svc-a {
	}

	chain svc-b {
	}
}
`},
			{ops: []confBuild{del(elem("m", v("198.19.0.11"), Proto(tcp), Port(80)))}, err: fail("notfound", 0), want: confSame},
			{ops: []confBuild{add(velem("nosuch", accept, v("198.19.0.10"), Proto(tcp), Port(80)))}, err: fail("notfound", 0), want: confSame},
			{ops: []confBuild{del(elem("nosuch", v("198.19.0.10"), Proto(tcp), Port(80)))}, err: fail("notfound", 0), want: confSame},
			{ops: []confBuild{add(velem("m", goTo("svc-c"), v("198.19.0.12"), Proto(tcp), Port(80)))}, err: fail("notfound", 0), want: confSame},
			{ops: []confBuild{add(velem("m", goTo("pre"), v("198.19.0.12"), Proto(tcp), Port(80)))}, err: fail("operation not supported", 0), want: confSame},
			{ops: []confBuild{flush(elem("m", v("198.19.0.10"), Proto(tcp), Port(80)))}, err: fail("invalid", 0), want: confSame},
		}},
		{name: "element/shapes-that-do-not-fit", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("a")),
				add(&Set{Name: "s", Key: []Type{TypeIPv4Addr}}),
				add(&Set{Name: "cat", Key: []Type{TypeIPv4Addr, TypeInetProto, TypeInetService}}),
				add(&Set{Name: "nat", Key: []Type{TypeIPv4Addr, TypeInetService}, Data: []Type{TypeIPv4Addr, TypeInetService}}),
				add(&Set{Name: "vm", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeVerdict}})},
				want: `table ip nftproxy {
	set cat {
		type ipv4_addr . inet_proto . inet_service
	}

	map nat {
		type ipv4_addr . inet_service : ipv4_addr . inet_service
	}

	set s {
		type ipv4_addr
	}

	map vm {
		type ipv4_addr : verdict
	}

	chain a {
	}
}
`},
			{ops: []confBuild{add(elem("s", v("fd00::1")))}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(elem("s", v("198.18.0.1"))), add(elem("cat", v("198.18.0.1"), Port(80)))}, err: fail("invalid", 1), want: confSame},
			{ops: []confBuild{add(elem("nat", v("198.18.0.1"), Port(80)))}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(&Element{Set: "nat", Key: key(v("198.18.0.1"), Port(80)), Data: key(v("fd00::1"), Port(8080))})}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(&Element{Set: "s", Key: key(v("198.18.0.1")), Data: key(v("198.18.0.2"))})}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(velem("nat", accept, v("198.18.0.1"), Port(80)))}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(elem("vm", v("198.18.0.1")))}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(&Element{Set: "s", Key: key(v("198.18.0.1")), Timeout: time.Hour})}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(&Element{Set: "s", Key: key(v("198.18.0.1")), KeyEnd: key(v("198.18.0.9"))})}, err: fail("invalid", 0), want: confSame},
			// The data map works with the right shapes.
			{ops: []confBuild{add(&Element{Set: "nat", Key: key(v("198.18.0.1"), Port(80)), Data: key(v("198.18.1.1"), Port(8080))})}, want: `table ip nftproxy {
	set cat {
		type ipv4_addr . inet_proto . inet_service
	}

	map nat {
		type ipv4_addr . inet_service : ipv4_addr . inet_service
		elements = {
			198.18.0.1 . 80 : 198.18.1.1 . 8080
		}
	}

	set s {
		type ipv4_addr
	}

	map vm {
		type ipv4_addr : verdict
	}

	chain a {
	}
}
`},
			{ops: []confBuild{add(&Element{Set: "nat", Key: key(v("198.18.0.1"), Port(80)), Data: key(v("198.18.1.1"), Port(8081))})}, err: fail("exists", 0), want: confSame},
		}},
		{name: "element/concatenated-intervals", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("svc-a")), add(ch("svc-rtp")), add(svcMap),
				add(velem("service-ips", goTo("svc-a"), v("198.19.0.10"), Proto(tcp), Port(80))),
				add(&Element{Set: "service-ips", Key: key(v("198.19.0.11"), Proto(udp), Port(16384)), KeyEnd: key(v("198.19.0.11"), Proto(udp), Port(32767)),
					Verdict: &Verdict{Kind: VerdictGoto, Chain: "svc-rtp"}, Comment: "ns/rtp:16384-32767"}),
				add(&Element{Set: "service-ips", Key: key(v("198.19.0.12"), Proto(tcp), Port(100)), KeyEnd: key(v("198.19.0.12"), Proto(tcp), Port(200)), Verdict: &accept})},
				want: `table ip nftproxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		flags interval
		elements = {
			198.19.0.10 . tcp . 80 : goto svc-a,
			198.19.0.11 . udp . 16384-32767 comment "ns/rtp:16384-32767" : goto svc-rtp,
			198.19.0.12 . tcp . 100-200 : accept
		}
	}

	chain svc-a {
	}

	chain svc-rtp {
	}
}
`},
			// A single key in an interval map is its own range: adding it with KeyEnd == Key is the same element.
			{ops: []confBuild{add(&Element{Set: "service-ips", Key: key(v("198.19.0.10"), Proto(tcp), Port(80)), KeyEnd: key(v("198.19.0.10"), Proto(tcp), Port(80)), Verdict: &Verdict{Kind: VerdictGoto, Chain: "svc-a"}})}, want: confSame},
			{ops: []confBuild{add(&Element{Set: "service-ips", Key: key(v("198.19.0.12"), Proto(tcp), Port(100)), KeyEnd: key(v("198.19.0.12"), Proto(tcp), Port(200)), Verdict: &accept})}, want: confSame},
			// Overlaps: the start or the end inside an existing range.
			{ops: []confBuild{add(&Element{Set: "service-ips", Key: key(v("198.19.0.12"), Proto(tcp), Port(150)), KeyEnd: key(v("198.19.0.12"), Proto(tcp), Port(250)), Verdict: &accept})}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{add(&Element{Set: "service-ips", Key: key(v("198.19.0.12"), Proto(tcp), Port(50)), KeyEnd: key(v("198.19.0.12"), Proto(tcp), Port(100)), Verdict: &accept})}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{add(velem("service-ips", accept, v("198.19.0.11"), Proto(udp), Port(20000)))}, err: fail("exists", 0), want: confSame},
			// Touching but not overlapping is fine. (A range that encloses another without either
			// end inside it is accepted too, by pipapo's two-point check, but such a state cannot
			// be loaded again in sorted order; fake_test.go covers it.)
			{ops: []confBuild{add(&Element{Set: "service-ips", Key: key(v("198.19.0.12"), Proto(tcp), Port(201)), KeyEnd: key(v("198.19.0.12"), Proto(tcp), Port(300)), Verdict: &drop})},
				want: `table ip nftproxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		flags interval
		elements = {
			198.19.0.10 . tcp . 80 : goto svc-a,
			198.19.0.11 . udp . 16384-32767 comment "ns/rtp:16384-32767" : goto svc-rtp,
			198.19.0.12 . tcp . 100-200 : accept,
			198.19.0.12 . tcp . 201-300 : drop
		}
	}

	chain svc-a {
	}

	chain svc-rtp {
	}
}
`},
			// An interval is deleted by its exact start and end.
			{ops: []confBuild{del(&Element{Set: "service-ips", Key: key(v("198.19.0.11"), Proto(udp), Port(16384)), KeyEnd: key(v("198.19.0.11"), Proto(udp), Port(32767))}),
				del(elem("service-ips", v("198.19.0.10"), Proto(tcp), Port(80))), del(ch("svc-rtp")), del(ch("svc-a"))},
				want: `table ip nftproxy {
	map service-ips {
		type ipv4_addr . inet_proto . inet_service : verdict
		flags interval
		elements = {
			198.19.0.12 . tcp . 100-200 : accept,
			198.19.0.12 . tcp . 201-300 : drop
		}
	}
}
`},
		}},
		{name: "element/one-field-intervals", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}),
				add(&Set{Name: "ranges", Key: []Type{TypeIPv4Addr}, Interval: true}),
				add(&Element{Set: "ranges", Key: key(v("198.18.0.0")), KeyEnd: key(v("198.18.0.255"))}),
				add(elem("ranges", v("198.18.1.1"))),
				add(&Set{Name: "ports", Key: []Type{TypeInetService}, Data: []Type{TypeVerdict}, Interval: true}),
				add(&Element{Set: "ports", Key: key(Port(30000)), KeyEnd: key(Port(32767)), Verdict: &drop})},
				want: `table ip nftproxy {
	map ports {
		type inet_service : verdict
		flags interval
		elements = {
			30000-32767 : drop
		}
	}

	set ranges {
		type ipv4_addr
		flags interval
		elements = {
			198.18.0.0-198.18.0.255,
			198.18.1.1
		}
	}
}
`},
			{ops: []confBuild{add(&Element{Set: "ranges", Key: key(v("198.18.0.0")), KeyEnd: key(v("198.18.0.255"))})}, want: confSame},
			{ops: []confBuild{add(&Element{Set: "ranges", Key: key(v("198.18.0.128")), KeyEnd: key(v("198.18.1.0"))})}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{add(elem("ranges", v("198.18.0.7")))}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{add(&Element{Set: "ports", Key: key(Port(32767)), KeyEnd: key(Port(32768)), Verdict: &drop})}, err: fail("exists", 0), want: confSame},
			{ops: []confBuild{del(&Element{Set: "ranges", Key: key(v("198.18.0.0")), KeyEnd: key(v("198.18.0.255"))}), add(elem("ranges", v("198.18.0.7")))},
				want: `table ip nftproxy {
	map ports {
		type inet_service : verdict
		flags interval
		elements = {
			30000-32767 : drop
		}
	}

	set ranges {
		type ipv4_addr
		flags interval
		elements = {
			198.18.0.7,
			198.18.1.1
		}
	}
}
`},
		}},
		{name: "element/timeouts-and-comments", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}),
				add(&Set{Name: "aff", Key: []Type{TypeIPv4Addr}, Dynamic: true, Timeout: 3 * time.Hour, Comment: "affinity for ns/a"}),
				add(&Element{Set: "aff", Key: key(v("198.18.0.1"))}),
				add(&Element{Set: "aff", Key: key(v("198.18.0.2")), Timeout: time.Hour, Comment: "pinned"}),
				add(&Set{Name: "t", Key: []Type{TypeIPv4Addr, TypeInetService}, HasTimeout: true}),
				add(&Element{Set: "t", Key: key(v("198.18.0.3"), Port(53)), Timeout: 90 * time.Minute}),
				add(&Element{Set: "t", Key: key(v("198.18.0.4"), Port(53))})},
				want: `table ip nftproxy {
	set aff {
		type ipv4_addr
		flags dynamic,timeout
		timeout 3h
		comment "affinity for ns/a"
		elements = {
			198.18.0.1,
			198.18.0.2 timeout 1h comment "pinned"
		}
	}

	set t {
		type ipv4_addr . inet_service
		flags timeout
		elements = {
			198.18.0.3 . 53 timeout 1h30m,
			198.18.0.4 . 53
		}
	}
}
`},
			{ops: []confBuild{del(elem("aff", v("198.18.0.2"))), del(elem("t", v("198.18.0.3"), Port(53)))}, want: `table ip nftproxy {
	set aff {
		type ipv4_addr
		flags dynamic,timeout
		timeout 3h
		comment "affinity for ns/a"
		elements = {
			198.18.0.1
		}
	}

	set t {
		type ipv4_addr . inet_service
		flags timeout
		elements = {
			198.18.0.4 . 53
		}
	}
}
`},
		}},
	}
}
