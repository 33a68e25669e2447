package nft

import "time"

// confAffinityCases cover the shapes of ClientIP session affinity: one dynamic timeout set per
// endpoint, a sticky rule that refreshes and reuses it, and a chain of numgen matches that picks
// an endpoint uniformly and records the choice in that endpoint's set.
func confAffinityCases() []confCase {
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
		flags dynamic,timeout
		timeout 3s
		comment "ns/web/tcp/http"
	}

	set aff-b {
		type ipv4_addr
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
	}
}
