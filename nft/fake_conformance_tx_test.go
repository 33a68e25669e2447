package nft

import "strings"

func confTxCases() []confCase {
	t4, t6 := confTables[0], confTables[1]
	long := strings.Repeat("n", MaxNameLen)
	return []confCase{
		// Names and comments over the limits, or holding a NUL the kernel would cut at, are
		// refused before anything is sent, naming the op.
		{name: "tx/string-limits", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch(long)), add(rule(long, strings.Repeat("c", MaxCommentLen), accept))},
				want: "table ip nftproxy {\n\tchain " + long + " {\n\t\taccept comment \"" + strings.Repeat("c", MaxCommentLen) + "\"\n\t}\n}\n"},
			{ops: []confBuild{add(ch(long + "x"))}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(ch("a")), add(ch("b\x00c"))}, err: fail("invalid", 1), want: confSame},
			{ops: []confBuild{add(rule(long, strings.Repeat("c", MaxCommentLen+1), accept))}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(rule(long, "a\x00b", accept))}, err: fail("invalid", 0), want: confSame},
			{ops: []confBuild{add(&Set{Name: "s", Key: []Type{TypeIPv4Addr}, Comment: "a\x00"})}, err: fail("invalid", 0), want: confSame},
		}},
		{name: "tx/atomic-rollback", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("a")), add(rule("a", "keep", accept))},
				want: "table ip nftproxy {\n\tchain a {\n\t\taccept comment \"keep\"\n\t}\n}\n"},
			// Everything before the failing op is undone: new objects, deletions and flushes alike.
			{ops: []confBuild{add(ch("b")), add(&Set{Name: "s", Key: []Type{TypeIPv4Addr}}), add(elem("s", v("198.18.0.1"))),
				flush(ch("a")), add(rule("b", "", jump("a"))), add(rule("b", "", jump("nosuch")))},
				err: fail("notfound", 5), want: confSame},
			{ops: []confBuild{del(ch("a")), add(ch("a"))}, want: "table ip nftproxy {\n\tchain a {\n\t}\n}\n"},
			// A failed transaction that would have created the table leaves no table.
			{ops: []confBuild{on(t6), add(&TableObj{}), add(ch("a")), add(rule("a", "", goTo("nosuch")))}, err: fail("notfound", 2), want: confSame},
		}},
		{name: "tx/flush-then-add-again", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("svc")), add(rule("svc", "first", DNAT{Addr: ip("198.18.1.1")})),
				add(&Set{Name: "vm", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeVerdict}}), add(velem("vm", goTo("svc"), v("198.19.0.1")))},
				want: `table ip nftproxy {
	map vm {
		type ipv4_addr : verdict
		elements = {
			198.19.0.1 : goto svc
		}
	}

	chain svc {
		dnat to 198.18.1.1 comment "first"
	}
}
`},
			// A full sync rewrites chains and maps by flushing and refilling them in one transaction.
			{ops: []confBuild{add(ch("svc")), flush(ch("svc")), add(rule("svc", "first", DNAT{Addr: ip("198.18.1.1")})),
				add(&Set{Name: "vm", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeVerdict}}), flush(&Set{Name: "vm"}), add(velem("vm", goTo("svc"), v("198.19.0.1")))},
				want: confSame},
			{ops: []confBuild{flush(ch("svc")), add(rule("svc", "second", DNAT{Addr: ip("198.18.1.2")})), flush(&Set{Name: "vm"}), add(velem("vm", drop, v("198.19.0.1")))},
				want: `table ip nftproxy {
	map vm {
		type ipv4_addr : verdict
		elements = {
			198.19.0.1 : drop
		}
	}

	chain svc {
		dnat to 198.18.1.2 comment "second"
	}
}
`},
		}},
		{name: "tx/both-families-in-one-batch", steps: []confStep{
			{ops: []confBuild{add(&TableObj{}), add(ch("a")), on(t6), add(&TableObj{}), add(ch("a"))},
				want: "table ip nftproxy {\n\tchain a {\n\t}\n}\ntable ip6 nftproxy {\n\tchain a {\n\t}\n}\n"},
			{ops: []confBuild{on(t4), add(ch("b")), on(t6), add(rule("a", "", CmpPrefix{Field: FieldSaddr, Prefix: confPrefix("198.18.0.0/15")}))},
				err: fail("invalid", 1), want: confSame},
			{ops: []confBuild{on(t4), del(ch("a")), on(t6), del(&TableObj{})}, want: confEmpty4},
		}},
	}
}
