package nft

// confSocketCases cover the health-check node-port handover's expressions: "socket wildcard",
// "socket transparent" (a lookup that stops the rule when the kernel finds no socket) and
// "redirect to :port", in both families, and where the kernel refuses them: a socket lookup
// outside prerouting, input and output (reached through a jump from forward), a redirect outside
// a nat chain at prerouting or output.
func confSocketCases() []confCase {
	build := func(f Family, node string) []confBuild {
		return []confBuild{
			add(&TableObj{}), add(base("nat-prerouting", ChainTypeNAT, HookPrerouting, -101)),
			add(base("nat-output", ChainTypeNAT, HookOutput, -101)),
			add(base("filter-input", ChainTypeFilter, HookInput, 0)),
			add(base("filter-forward", ChainTypeFilter, HookForward, 0)),
			add(ch("health-checks")), add(ch("from-forward")),
			add(&Set{Name: "nodeport-ips", Key: []Type{f.AddrType()}}),
			add(&Set{Name: "health-check-ports", Key: []Type{TypeInetService}, Comment: "health-check node ports"}),
			add(elem("nodeport-ips", v(node))), add(elem("health-check-ports", Port(32000))),
			add(rule("nat-prerouting", "", CmpSet{Fields: []Field{FieldDaddr}, Set: "nodeport-ips"}, Cmp{Field: FieldL4Proto, Value: Proto(tcp)},
				CmpSet{Fields: []Field{FieldDport}, Set: "health-check-ports"}, goTo("health-checks"))),
			add(rule("health-checks", "held by a full socket", SocketMatch{Key: SocketWildcard}, Verdict{Kind: VerdictReturn})),
			add(rule("health-checks", "", SocketMatch{Key: SocketWildcard, Value: true}, Verdict{Kind: VerdictReturn})),
			add(rule("health-checks", "", SocketMatch{Key: SocketTransparent, Value: true}, accept)),
			add(rule("health-checks", "to the listener", Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, Redirect{Port: 10253})),
			add(rule("nat-output", "", CmpSet{Fields: []Field{FieldDaddr}, Set: "nodeport-ips"}, Cmp{Field: FieldL4Proto, Value: Proto(tcp)},
				CmpSet{Fields: []Field{FieldDport}, Set: "health-check-ports"}, Redirect{Port: 10253})),
			add(rule("filter-input", "", SocketMatch{Key: SocketTransparent}, accept)),
			add(rule("filter-forward", "", jump("from-forward"))),
		}
	}
	return []confCase{
		{name: "rule/socket-redirect", steps: []confStep{
			{ops: build(IPv4, "198.18.0.1"), want: confSocketWant("ip", "198.18.0.1")},
			{ops: append([]confBuild{on(confTables[1])}, build(IPv6, "fd00::1")...),
				want: confSocketWant("ip", "198.18.0.1") + confSocketWant("ip6", "fd00::1")},
			// A socket lookup reached from forward, a redirect in a filter chain or in a nat
			// chain at postrouting: refused when the table is validated.
			{ops: []confBuild{add(rule("from-forward", "", SocketMatch{Key: SocketWildcard, Value: true}, accept))},
				err: fail("operation not supported", 0), want: confSame},
			{ops: []confBuild{add(rule("filter-input", "", Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, Redirect{Port: 10253}))},
				err: fail("operation not supported", 0), want: confSame},
			{ops: []confBuild{add(base("nat-postrouting", ChainTypeNAT, HookPostrouting, 100)),
				add(rule("nat-postrouting", "", Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, Redirect{Port: 10253}))},
				err: fail("operation not supported", 1), want: confSame},
			// Values nothing can encode are refused before sending.
			{ops: []confBuild{add(rule("filter-input", "", SocketMatch{Key: 1}))}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(rule("health-checks", "", Cmp{Field: FieldL4Proto, Value: Proto(tcp)}, Redirect{}))}, err: fail("invalid", 0), want: confSame},
		}},
	}
}

func confSocketWant(fam, node string) string {
	return `table ` + fam + ` nftproxy {
	set health-check-ports {
		type inet_service
		comment "health-check node ports"
		elements = {
			32000
		}
	}

	set nodeport-ips {
		type ` + map[string]string{"ip": "ipv4_addr", "ip6": "ipv6_addr"}[fam] + `
		elements = {
			` + node + `
		}
	}

	chain filter-forward {
		type filter hook forward priority 0; policy accept;
		jump from-forward
	}

	chain filter-input {
		type filter hook input priority 0; policy accept;
		socket transparent 0 accept
	}

	chain from-forward {
	}

	chain health-checks {
		socket wildcard 0 return comment "held by a full socket"
		socket wildcard 1 return
		socket transparent 1 accept
		meta l4proto tcp redirect to :10253 comment "to the listener"
	}

	chain nat-output {
		type nat hook output priority -101; policy accept;
		` + fam + ` daddr @nodeport-ips meta l4proto tcp th dport @health-check-ports redirect to :10253
	}

	chain nat-prerouting {
		type nat hook prerouting priority -101; policy accept;
		` + fam + ` daddr @nodeport-ips meta l4proto tcp th dport @health-check-ports goto health-checks
	}
}
`
}
