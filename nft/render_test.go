package nft

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

func TestRenderExpr(t *testing.T) {
	pfx4, pfx6 := netip.MustParsePrefix("198.18.7.1/15"), netip.MustParsePrefix("fd00::1/16")
	tests := []struct {
		fam  Family
		expr Expr
		want string
	}{
		{IPv4, Cmp{Field: FieldDaddr, Value: v("198.18.0.1")}, "ip daddr 198.18.0.1"},
		{IPv6, Cmp{Field: FieldSaddr, Neg: true, Value: v("fd00::1")}, "ip6 saddr != fd00::1"},
		{IPv4, Cmp{Field: FieldL4Proto, Value: Proto(132)}, "meta l4proto sctp"},
		{IPv4, Cmp{Field: FieldL4Proto, Value: Proto(47)}, "meta l4proto 47"},
		{IPv4, Cmp{Field: FieldDport, Value: Port(443)}, "th dport 443"},
		{IPv4, Cmp{Field: FieldSport, Neg: true, Value: Port(1)}, "th sport != 1"},
		{IPv4, Cmp{Field: FieldMark, Value: Mark(0x4000)}, "meta mark 0x00004000"},
		{IPv4, CmpPrefix{Field: FieldSaddr, Neg: true, Prefix: pfx4}, "ip saddr != 198.18.0.0/15"},
		{IPv6, CmpPrefix{Field: FieldDaddr, Prefix: pfx6}, "ip6 daddr fd00::/16"},
		{IPv4, CmpSet{Fields: []Field{FieldSaddr, FieldDaddr}, Set: "hairpin"}, "ip saddr . ip daddr @hairpin"},
		{IPv4, CmpSet{Fields: []Field{FieldDaddr}, Neg: true, Set: "cluster-ips"}, "ip daddr != @cluster-ips"},
		{IPv6, VMap{Fields: []Field{FieldDaddr, FieldL4Proto, FieldDport}, Map: "service-ips"}, "ip6 daddr . meta l4proto . th dport vmap @service-ips"},
		{IPv4, MarkTest{Mask: 0x4000}, "meta mark & 0x00004000 == 0x00000000"},
		{IPv4, MarkTest{Mask: 0x4000, NonZero: true}, "meta mark & 0x00004000 != 0x00000000"},
		{IPv4, CtState{Mask: CtStateNew}, "ct state new"},
		{IPv4, CtState{Mask: CtStateEstablished | CtStateRelated | CtStateUntracked}, "ct state established,related,untracked"},
		{IPv4, CtStatus{Mask: CtStatusDNAT}, "ct status dnat"},
		{IPv4, FibAddrType{Daddr: true}, "fib daddr type local"},
		{IPv4, FibAddrType{Neg: true}, "fib saddr type != local"},
		{IPv4, MarkOr{Bits: 0x4000}, "meta mark set meta mark | 0x00004000"},
		{IPv4, MarkXor{Bits: 0x4000}, "meta mark set meta mark ^ 0x00004000"},
		{IPv4, Masquerade{}, "masquerade"},
		{IPv4, Masquerade{FullyRandom: true}, "masquerade fully-random"},
		{IPv4, DNAT{Addr: ip("198.18.1.1")}, "dnat to 198.18.1.1"},
		{IPv4, DNAT{Addr: ip("198.18.1.1"), Port: 8080}, "dnat to 198.18.1.1:8080"},
		{IPv6, DNAT{Addr: ip("fd00::1"), Port: 8080}, "dnat to [fd00::1]:8080"},
		{IPv4, DNATNumgen{Modulus: 3, Map: "ep-x"}, "dnat to numgen random mod 3 map @ep-x"},
		{IPv6, DNATNumgen{Modulus: 3, Map: "ep-x", WithPort: true}, "dnat ip6 to numgen random mod 3 map @ep-x"},
		{IPv4, DNATNumgen{Modulus: 3, Map: "endpoints", WithPort: true, Key: DNATNumgenKeyAddr}, "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 3 map @endpoints"},
		{IPv6, DNATNumgen{Modulus: 2, Map: "endpoints", WithPort: true, Key: DNATNumgenKeyAddr}, "dnat ip6 to ip6 daddr . meta l4proto . th dport . numgen random mod 2 map @endpoints"},
		{IPv4, DNATNumgen{Modulus: 3, Map: "nodeport-endpoints", WithPort: true, Key: DNATNumgenKeyPort}, "dnat ip to meta l4proto . th dport . numgen random mod 3 map @nodeport-endpoints"},
		{IPv4, DNATNumgen{Modulus: 1, Map: "e", Key: DNATNumgenKeyAddr}, "dnat to ip daddr . meta l4proto . th dport . numgen random mod 1 map @e"},
		{IPv4, DNATNumgen{Modulus: 1, Map: "e", Key: []Field{FieldSaddr}}, `%bad-numgen-key% "numgen map key fields [1]"`},
		{IPv4, Reject{}, "reject"},
		{IPv4, Reject{TCPReset: true}, "reject with tcp reset"},
		{IPv4, SetUpdate{Fields: []Field{FieldSaddr}, Set: "aff"}, "update @aff { ip saddr }"},
		{IPv4, NumgenMatch{Modulus: 3, Value: 2}, "numgen random mod 3 2"},
		{IPv4, SetUpdate{Fields: []Field{FieldSaddr}, Set: "aff", Timeout: 90 * time.Minute}, "update @aff { ip saddr timeout 1h30m }"},
		{IPv4, Verdict{Kind: VerdictGoto, Chain: "svc-abc/ns/web/tcp/http"}, "goto svc-abc/ns/web/tcp/http"},
		{IPv4, Verdict{Kind: VerdictJump, Chain: "services"}, "jump services"},
		{IPv4, Verdict{Kind: VerdictContinue}, "continue"},
		// What nft cannot read back fails loudly.
		{IPv4, Unknown{Description: `cmp "x"`}, `%unknown-expression% "cmp 'x'"`},
		{IPv4, DNAT{Addr: ip("fd00::1")}, `dnat to %bad-address% "fd00::1 in a ip table"`},
		{IPv4, Verdict{Kind: VerdictJump, Chain: "has space"}, `jump "has space"`},
		{IPv4, CtState{Mask: 0x100}, `ct state %unnamed-bits% "0x100"`},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := renderExpr(tt.fam, tt.expr); got != tt.want {
				t.Errorf("renderExpr(%s, %#v):\ngot  %q\nwant %q", tt.fam, tt.expr, got, tt.want)
			}
		})
	}
}

func TestRenderDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{3 * time.Hour, "3h"}, {90 * time.Minute, "1h30m"}, {10800 * time.Second, "3h"},
		{2*time.Second + 500*time.Millisecond, "2s500ms"}, {26 * time.Hour, "1d2h"}, {time.Microsecond, "0s"},
	}
	for _, tt := range tests {
		if got := renderDuration(tt.d); got != tt.want {
			t.Errorf("renderDuration(%v): got %q, want %q", tt.d, got, tt.want)
		}
	}
}

func TestRenderStringsAndNames(t *testing.T) {
	tests := []struct{ in, want string }{
		{"ns/web:http", `"ns/web:http"`},
		{`say "hi"`, `"say 'hi'" %unrenderable-string%`},
		{"two\nlines", `"two'lines" %unrenderable-string%`},
	}
	for _, tt := range tests {
		if got := renderString(tt.in); got != tt.want {
			t.Errorf("renderString(%q): got %s, want %s", tt.in, got, tt.want)
		}
	}
	for name, want := range map[string]string{"svc-ABC/ns/a/tcp/p": "svc-ABC/ns/a/tcp/p", "_x.y": "_x.y", "9lives": `"9lives"`, "a b": `"a b"`} {
		if got := renderName(name); got != want {
			t.Errorf("renderName(%q): got %s, want %s", name, got, want)
		}
	}
}

// TestCanonicalEqual checks that order does not matter and content does.
func TestCanonicalEqual(t *testing.T) {
	tbl := confTables[0]
	mk := func(reverse bool, extra bool) *Ruleset {
		rs := &Ruleset{Table: tbl, Elements: map[string][]Element{}}
		chains := []Chain{{Name: "b"}, {Name: "a", Base: &BaseChain{Type: ChainTypeNAT, Hook: HookPrerouting, Priority: -100}}}
		sets := []Set{{Name: "y", Key: []Type{TypeIPv4Addr}, Timeout: time.Hour}, {Name: "x", Key: []Type{TypeInetService}, Interval: true}}
		els := []Element{{Set: "y", Key: key(v("198.18.0.2")), Timeout: time.Hour}, {Set: "y", Key: key(v("198.18.0.1"))}}
		rules := []Rule{{Chain: "a", Exprs: []Expr{accept}}, {Chain: "b", Exprs: []Expr{drop}}, {Chain: "a", Exprs: []Expr{drop}}}
		if reverse {
			chains[0], chains[1] = chains[1], chains[0]
			sets[0], sets[1] = sets[1], sets[0]
			els[0], els[1] = els[1], els[0]
			els[0].Timeout = 0 // equal to the set's default
			rules = []Rule{rules[1], rules[0], rules[2]}
			chains[0].Base.Policy = PolicyAccept
		}
		rs.Chains, rs.Sets, rs.Rules = chains, sets, rules
		rs.Elements["y"] = els
		rs.Elements["x"] = []Element{{Set: "x", Key: key(Port(80)), KeyEnd: key(Port(80))}}
		if extra {
			rs.Rules = append(rs.Rules, Rule{Chain: "b", Exprs: []Expr{accept}, Comment: "extra"})
		}
		return rs
	}
	if d := Diff(mk(false, false), mk(true, false)); d != "" {
		t.Errorf("Equal of the same ruleset in another order: got diff\n%s\nwant none", d)
	}
	d := Diff(mk(false, false), mk(false, true))
	if want := "+ accept comment \"extra\"\n"; d != want {
		t.Errorf("Equal with one extra rule: got diff %q, want %q", d, want)
	}
	if got := Canonical(mk(false, false)).Elements["x"][0].KeyEnd; got != nil {
		t.Errorf("Canonical kept KeyEnd %v equal to the key, want nil", got)
	}
}

// nftJSON is the part of `nft -j list table` the render tests count.
type nftJSON struct {
	Nftables []map[string]json.RawMessage `json:"nftables"`
}

type nftCounts struct {
	Chains, Rules int
	Sets          map[string]int // set or map name -> elements
}

func nftCount(t *testing.T, out string) nftCounts {
	t.Helper()
	var doc nftJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("parse nft -j output: %v\n%s", err, out)
	}
	c := nftCounts{Sets: map[string]int{}}
	for _, obj := range doc.Nftables {
		for kind, raw := range obj {
			switch kind {
			case "chain":
				c.Chains++
			case "rule":
				c.Rules++
			case "set", "map":
				var s struct {
					Name string            `json:"name"`
					Elem []json.RawMessage `json:"elem"`
				}
				if err := json.Unmarshal(raw, &s); err != nil {
					t.Fatalf("parse %s: %v", kind, err)
				}
				c.Sets[s.Name] = len(s.Elem)
			}
		}
	}
	return c
}

func wantCounts(rs *Ruleset) nftCounts {
	c := nftCounts{Chains: len(rs.Chains), Rules: len(rs.Rules), Sets: map[string]int{}}
	for _, s := range rs.Sets {
		c.Sets[s.Name] = len(rs.Elements[s.Name])
	}
	return c
}

// TestRenderLoadsInNft feeds the text of every state the conformance cases reach (every object
// kind and expression shape, both families) to `nft -f` in a private namespace, and checks that
// nft accepts it and holds the same number of chains, rules, sets and elements, and that
// reading the table back through netlink gives the same ruleset.
func TestRenderLoadsInNft(t *testing.T) {
	ns := netns.New(t, "nftrender")
	seen := map[string]bool{}
	var states []*Ruleset
	ctx := context.Background()
	for _, tc := range confCases() {
		k := NewFake()
		c := &confCtx{t: t, k: k}
		for _, st := range tc.steps {
			tx := NewTransaction(confTables[0])
			for _, b := range st.ops {
				b(tx, c)
			}
			if _, err := k.Apply(ctx, tx); err != nil {
				continue
			}
			for _, tb := range confTables {
				rs, err := k.Dump(ctx, tb)
				if err != nil {
					continue
				}
				if text := Render(rs); !seen[text] {
					seen[text] = true
					states = append(states, rs)
				}
			}
		}
	}
	if len(states) < 20 {
		t.Fatalf("collected %d distinct states from the conformance cases, want at least 20", len(states))
	}
	k, err := NewKernel(WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatalf("NewKernel: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	for i, rs := range states {
		t.Run(fmt.Sprintf("%d-%s", i, rs.Table.Family), func(t *testing.T) {
			text := Render(rs)
			if _, err := ns.RunStdin("flush ruleset\n"+text, "nft", "-f", "-"); err != nil {
				t.Fatalf("nft -f refused the rendered text: %v\n%s", err, text)
			}
			out, err := ns.Run("nft", "-j", "list", "table", rs.Table.Family.String(), rs.Table.Name)
			if err != nil {
				t.Fatal(err)
			}
			got, want := nftCount(t, out), wantCounts(rs)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("nft holds %+v, want %+v; text:\n%s", got, want, text)
			}
			// What nft wrote, read back through netlink, must be the same ruleset: proof that
			// the text means what the model means.
			back, err := k.Dump(ctx, rs.Table)
			if err != nil {
				t.Fatalf("Dump after nft -f: %v", err)
			}
			if d := Diff(rs, back); d != "" {
				t.Errorf("nft -f of the text, read back with Dump, differs (- text, + read back):\n%s\ntext:\n%s", d, text)
			}
		})
	}
}

// TestRenderLoudFailures checks that what Render marks as unrenderable really makes nft fail.
func TestRenderLoudFailures(t *testing.T) {
	ns := netns.New(t, "nftloud")
	tbl := confTables[0]
	tests := []struct {
		name string
		rs   *Ruleset
	}{
		{"unknown expression", &Ruleset{Table: tbl, Chains: []Chain{{Name: "a"}}, Rules: []Rule{{Chain: "a", Exprs: []Expr{Unknown{Description: "payload load 4b @ network header + 99"}}}}}},
		{"empty rule", &Ruleset{Table: tbl, Chains: []Chain{{Name: "a"}}, Rules: []Rule{{Chain: "a"}}}},
		{"quote in comment", &Ruleset{Table: tbl, Chains: []Chain{{Name: "a"}}, Rules: []Rule{{Chain: "a", Exprs: []Expr{accept}, Comment: `a" drop comment "b`}}}},
		{"name nft cannot parse", &Ruleset{Table: tbl, Chains: []Chain{{Name: "svc a"}}}},
		{"integer key without numgen", &Ruleset{Table: tbl, Sets: []Set{{Name: "m", Key: []Type{TypeInteger}, Data: []Type{TypeIPv4Addr}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := Render(tt.rs)
			if !strings.Contains(text, "%") && !strings.Contains(text, `"svc a"`) {
				t.Fatalf("Render has no failure marker:\n%s", text)
			}
			if _, err := ns.RunStdin(text, "nft", "-f", "-"); err == nil {
				t.Errorf("nft -f accepted text that should fail:\n%s", text)
			}
		})
	}
}

// TestRenderNumgenKeyedMap pins the typeof text of the shared endpoint maps (a packet-field key
// ending in numgen), for both families, as nft 1.0.6 lists it.
func TestRenderNumgenKeyedMap(t *testing.T) {
	tests := []struct {
		fam  Family
		set  Set
		want string
	}{
		{IPv4, Set{Name: "endpoints", Key: []Type{TypeIPv4Addr, TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{TypeIPv4Addr, TypeInetService}, NumgenKey: 1},
			"typeof ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport"},
		{IPv6, Set{Name: "endpoints", Key: []Type{TypeIPv6Addr, TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{TypeIPv6Addr}, NumgenKey: 1},
			"typeof ip6 daddr . meta l4proto . th dport . numgen random mod 1 : ip6 daddr"},
		{IPv4, Set{Name: "nodeport-endpoints", Key: []Type{TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{TypeIPv4Addr, TypeInetService}, NumgenKey: 2},
			"typeof meta l4proto . th dport . numgen random mod 2 : ip daddr . th dport"},
	}
	for _, tt := range tests {
		if got := renderSetType(tt.fam, &tt.set); got != tt.want {
			t.Errorf("renderSetType(%s, %s):\ngot  %q\nwant %q", tt.fam, tt.set.Name, got, tt.want)
		}
	}
	el := Element{Set: "endpoints", Key: key(v("198.18.0.1"), Proto(6), Port(80), Int(2)), Data: key(v("198.18.1.1"), Port(8080))}
	if got, want := renderElement(el), "198.18.0.1 . tcp . 80 . 2 : 198.18.1.1 . 8080"; got != want {
		t.Errorf("renderElement: got %q, want %q", got, want)
	}
}
