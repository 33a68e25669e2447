package nft

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/golden"
	"github.com/nftproxy/nftproxy/test/netns"
	"golang.org/x/sys/unix"
)

// Address plan of the kernel tests: services in 198.18.0.0/24, endpoints in 198.19.0.0/24,
// IPv6 in fd00::/64.

// kernelTestNS opens a Kernel in a fresh namespace.
func kernelTestNS(t testing.TB, prefix string) (*Kernel, *netns.NS) {
	t.Helper()
	ns := netns.New(t, prefix)
	k, err := NewKernel(WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatalf("NewKernel: %v", err)
	}
	t.Cleanup(func() { k.Close() })
	return k, ns
}

func kernelAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// kernelBaseTx is the skeleton every shape test needs: the table, base chains for nat and filter,
// a regular chain, and one set or map of each kind the shapes reference.
func kernelBaseTx(fam Family) *Transaction {
	tx := NewTransaction(Table{Family: fam, Name: "nftproxy"})
	a := fam.AddrType()
	tx.Add(&TableObj{})
	tx.Add(&Chain{Name: "prerouting", Base: &BaseChain{Type: ChainTypeNAT, Hook: HookPrerouting, Priority: -100}})
	tx.Add(&Chain{Name: "postrouting", Base: &BaseChain{Type: ChainTypeNAT, Hook: HookPostrouting, Priority: 100}})
	tx.Add(&Chain{Name: "filter-input", Base: &BaseChain{Type: ChainTypeFilter, Hook: HookInput, Priority: 0, Policy: PolicyDrop}})
	tx.Add(&Chain{Name: "svc-a"})
	tx.Add(&Set{Name: "service-ips", Key: []Type{a, TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict}, Interval: true, Comment: "ClusterIP . proto . port"})
	tx.Add(&Set{Name: "service-hash", Key: []Type{a, TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict}})
	tx.Add(&Set{Name: "allports", Key: []Type{a, TypeInetProto}, Data: []Type{TypeVerdict}})
	tx.Add(&Set{Name: "nodeports", Key: []Type{TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict}, Interval: true})
	tx.Add(&Set{Name: "pairs", Key: []Type{a, a}})
	tx.Add(&Set{Name: "cidrs", Key: []Type{a}, Interval: true, Comment: "cluster CIDRs"})
	tx.Add(&Set{Name: "marks", Key: []Type{TypeMark}, Data: []Type{TypeVerdict}})
	tx.Add(&Set{Name: "affinity", Key: []Type{a}, Dynamic: true, Timeout: 3 * time.Hour})
	tx.Add(&Set{Name: "aff-port", Key: []Type{a, TypeInetService}, Dynamic: true, HasTimeout: true})
	tx.Add(&Set{Name: "lb-a", Key: []Type{TypeInteger}, Data: []Type{TypeVerdict}, NumgenKey: 2})
	tx.Add(&Set{Name: "ep-a", Key: []Type{TypeInteger}, Data: []Type{a, TypeInetService}, NumgenKey: 3})
	tx.Add(&Set{Name: "ep-b", Key: []Type{TypeInteger}, Data: []Type{a}, NumgenKey: 2})
	tx.Add(&Set{Name: "endpoints", Key: []Type{a, TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{a, TypeInetService}, NumgenKey: 1})
	tx.Add(&Set{Name: "nodeport-endpoints", Key: []Type{TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{a}, NumgenKey: 1})
	return tx
}

// kernelShape is one rule shape, with the text nft lists for it.
type kernelShape struct {
	name  string
	chain string
	exprs func(fam Family) []Expr
}

func kernelShapes() []kernelShape {
	ip := func(fam Family, v4, v6 string) netip.Addr {
		if fam == IPv6 {
			return kernelAddr(v6)
		}
		return kernelAddr(v4)
	}
	pfx := func(fam Family, v4, v6 string) netip.Prefix {
		if fam == IPv6 {
			return netip.MustParsePrefix(v6)
		}
		return netip.MustParsePrefix(v4)
	}
	tcp := Cmp{Field: FieldL4Proto, Value: Proto(unix.IPPROTO_TCP)}
	return []kernelShape{
		{"cmp-daddr", "prerouting", func(f Family) []Expr {
			return []Expr{Cmp{Field: FieldDaddr, Value: Addr(ip(f, "198.18.0.1", "fd00::1"))}}
		}},
		{"cmp-saddr-neg", "prerouting", func(f Family) []Expr {
			return []Expr{Cmp{Field: FieldSaddr, Neg: true, Value: Addr(ip(f, "198.18.0.2", "fd00::2"))}}
		}},
		{"cmp-l4proto", "prerouting", func(Family) []Expr { return []Expr{tcp} }},
		{"cmp-dport", "prerouting", func(Family) []Expr { return []Expr{Cmp{Field: FieldDport, Value: Port(80)}} }},
		{"cmp-sport-neg", "prerouting", func(Family) []Expr { return []Expr{Cmp{Field: FieldSport, Neg: true, Value: Port(53)}} }},
		{"cmp-mark", "prerouting", func(Family) []Expr { return []Expr{Cmp{Field: FieldMark, Value: Mark(0x10)}} }},
		{"prefix-odd", "prerouting", func(f Family) []Expr {
			return []Expr{CmpPrefix{Field: FieldSaddr, Prefix: pfx(f, "198.18.0.0/15", "fd00::/65")}}
		}},
		{"prefix-bytes-neg", "prerouting", func(f Family) []Expr {
			return []Expr{CmpPrefix{Field: FieldDaddr, Neg: true, Prefix: pfx(f, "198.18.0.0/16", "fd00::/64")}}
		}},
		{"prefix-zero", "prerouting", func(f Family) []Expr {
			return []Expr{CmpPrefix{Field: FieldDaddr, Prefix: pfx(f, "0.0.0.0/0", "::/0")}}
		}},
		{"cmpset-concat", "prerouting", func(Family) []Expr { return []Expr{CmpSet{Fields: []Field{FieldSaddr, FieldDaddr}, Set: "pairs"}} }},
		{"cmpset-neg-interval", "prerouting", func(Family) []Expr { return []Expr{CmpSet{Fields: []Field{FieldSaddr}, Neg: true, Set: "cidrs"}} }},
		{"vmap-interval", "prerouting", func(Family) []Expr {
			return []Expr{VMap{Fields: []Field{FieldDaddr, FieldL4Proto, FieldDport}, Map: "service-ips"}}
		}},
		{"vmap-hash", "prerouting", func(Family) []Expr {
			return []Expr{VMap{Fields: []Field{FieldDaddr, FieldL4Proto, FieldDport}, Map: "service-hash"}}
		}},
		{"vmap-allports", "prerouting", func(Family) []Expr { return []Expr{VMap{Fields: []Field{FieldDaddr, FieldL4Proto}, Map: "allports"}} }},
		{"vmap-nodeports", "prerouting", func(Family) []Expr { return []Expr{VMap{Fields: []Field{FieldL4Proto, FieldDport}, Map: "nodeports"}} }},
		{"vmap-mark", "prerouting", func(Family) []Expr { return []Expr{VMap{Fields: []Field{FieldMark}, Map: "marks"}} }},
		{"marktest-zero-return", "postrouting", func(Family) []Expr {
			return []Expr{MarkTest{Mask: 0x4000}, Verdict{Kind: VerdictReturn}}
		}},
		{"marktest-nonzero-drop", "filter-input", func(Family) []Expr { return []Expr{MarkTest{Mask: 0x8000, NonZero: true}, Verdict{Kind: VerdictDrop}} }},
		{"ct-state", "filter-input", func(Family) []Expr {
			return []Expr{CtState{Mask: CtStateEstablished | CtStateRelated}, Verdict{Kind: VerdictAccept}}
		}},
		{"ct-state-invalid", "filter-input", func(Family) []Expr { return []Expr{CtState{Mask: CtStateInvalid}, Verdict{Kind: VerdictDrop}} }},
		{"ct-status", "postrouting", func(Family) []Expr { return []Expr{CtStatus{Mask: CtStatusDNAT}, Verdict{Kind: VerdictAccept}} }},
		{"fib-local", "prerouting", func(Family) []Expr {
			return []Expr{FibAddrType{Daddr: true}, Verdict{Kind: VerdictJump, Chain: "svc-a"}}
		}},
		{"fib-not-local", "prerouting", func(Family) []Expr { return []Expr{FibAddrType{Daddr: true, Neg: true}, Verdict{Kind: VerdictReturn}} }},
		{"fib-saddr", "prerouting", func(Family) []Expr { return []Expr{FibAddrType{}, Verdict{Kind: VerdictContinue}} }},
		{"mark-or", "svc-a", func(Family) []Expr { return []Expr{MarkOr{Bits: 0x4000}} }},
		{"mark-xor", "postrouting", func(Family) []Expr { return []Expr{MarkXor{Bits: 0x4000}} }},
		{"masquerade", "postrouting", func(Family) []Expr { return []Expr{Masquerade{}} }},
		{"masquerade-random", "postrouting", func(Family) []Expr { return []Expr{Masquerade{FullyRandom: true}} }},
		{"dnat-addr", "svc-a", func(f Family) []Expr { return []Expr{DNAT{Addr: ip(f, "198.19.0.5", "fd00::5")}} }},
		{"dnat-port", "svc-a", func(f Family) []Expr { return []Expr{tcp, DNAT{Addr: ip(f, "198.19.0.5", "fd00::5"), Port: 8080}} }},
		{"dnat-numgen", "svc-a", func(Family) []Expr { return []Expr{DNATNumgen{Modulus: 2, Map: "ep-b"}} }},
		{"dnat-numgen-port", "svc-a", func(Family) []Expr {
			return []Expr{Cmp{Field: FieldL4Proto, Value: Proto(unix.IPPROTO_TCP)}, DNATNumgen{Modulus: 3, Map: "ep-a", WithPort: true}}
		}},
		{"dnat-numgen-key-addr", "svc-a", func(Family) []Expr {
			return []Expr{DNATNumgen{Modulus: 3, Map: "endpoints", WithPort: true, Key: DNATNumgenKeyAddr}}
		}},
		{"dnat-numgen-key-port", "svc-a", func(Family) []Expr {
			return []Expr{DNATNumgen{Modulus: 2, Map: "nodeport-endpoints", Key: DNATNumgenKeyPort}}
		}},
		{"reject-icmp", "filter-input", func(Family) []Expr { return []Expr{Reject{}} }},
		{"reject-tcp", "filter-input", func(Family) []Expr { return []Expr{tcp, Reject{TCPReset: true}} }},
		{"update-affinity", "svc-a", func(Family) []Expr { return []Expr{SetUpdate{Fields: []Field{FieldSaddr}, Set: "affinity"}} }},
		{"numgen-match-affinity", "svc-a", func(f Family) []Expr {
			return []Expr{NumgenMatch{Modulus: 3, Value: 1}, SetUpdate{Fields: []Field{FieldSaddr}, Set: "affinity"}, tcp, DNAT{Addr: ip(f, "198.19.0.5", "fd00::5"), Port: 8080}}
		}},
		{"sticky-affinity", "svc-a", func(f Family) []Expr {
			return []Expr{CmpSet{Fields: []Field{FieldSaddr}, Set: "affinity"}, SetUpdate{Fields: []Field{FieldSaddr}, Set: "affinity"}, DNAT{Addr: ip(f, "198.19.0.5", "fd00::5")}}
		}},
		{"update-timeout", "svc-a", func(Family) []Expr {
			return []Expr{SetUpdate{Fields: []Field{FieldSaddr, FieldSport}, Set: "aff-port", Timeout: time.Hour}}
		}},
		{"verdict-goto", "prerouting", func(Family) []Expr { return []Expr{Verdict{Kind: VerdictGoto, Chain: "svc-a"}} }},
		{"socket-wildcard-0", "prerouting", func(Family) []Expr {
			return []Expr{tcp, Cmp{Field: FieldDport, Value: Port(32000)}, SocketMatch{Key: SocketWildcard}, Verdict{Kind: VerdictReturn}}
		}},
		{"socket-wildcard-1", "prerouting", func(Family) []Expr {
			return []Expr{SocketMatch{Key: SocketWildcard, Value: true}, Verdict{Kind: VerdictReturn}}
		}},
		{"socket-transparent", "filter-input", func(Family) []Expr {
			return []Expr{SocketMatch{Key: SocketTransparent, Value: true}, Verdict{Kind: VerdictAccept}}
		}},
		{"redirect", "prerouting", func(Family) []Expr { return []Expr{tcp, Redirect{Port: 10253}} }},
	}
}

// kernelNftJSON runs `nft -j list ruleset` in ns and returns its objects.
func kernelNftJSON(t *testing.T, ns *netns.NS) []map[string]json.RawMessage {
	t.Helper()
	out, err := ns.Run("nft", "-j", "list", "ruleset")
	if err != nil {
		t.Fatalf("nft -j list ruleset: %v", err)
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("parse nft -j output: %v", err)
	}
	return doc.Nftables
}

// kernelNftDebugRules is the bytecode nft prints for the table's rules (`--debug=netlink`),
// without handles: two rulesets with equal output hold the same expressions.
func kernelNftDebugRules(t *testing.T, ns *netns.NS, fam Family) string {
	t.Helper()
	out, err := ns.Run("nft", "--debug=netlink", "list", "table", fam.String(), "nftproxy")
	if err != nil {
		t.Fatalf("nft --debug=netlink list table: %v", err)
	}
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  [") {
			keep = append(keep, l)
		} else if f := strings.Fields(l); strings.HasPrefix(l, fam.String()+" nftproxy ") && len(f) >= 3 {
			keep = append(keep, strings.Join(f[:3], " ")) // without handle and position
		}
	}
	return strings.Join(keep, "\n")
}

var (
	kernelHandleRE  = regexp.MustCompile(` # handle \d+`)
	kernelExpiresRE = regexp.MustCompile(` expires [0-9hms]+`)
)

// TestKernelShapes applies every object kind and rule shape, in ip and ip6 tables, and checks:
// nft -j sees exactly the rules sent; Dump returns what was sent; `nft list ruleset` fed to `nft -f`
// in a second namespace lists identically and compiles to the same bytecode.
func TestKernelShapes(t *testing.T) {
	for _, fam := range []Family{IPv4, IPv6} {
		t.Run(fam.String(), func(t *testing.T) {
			k, ns := kernelTestNS(t, "nftk-shape")
			tx := kernelBaseTx(fam)
			shapes := kernelShapes()
			var want []Rule
			for _, s := range shapes {
				r := &Rule{Chain: s.chain, Exprs: s.exprs(fam), Comment: s.name}
				tx.Add(r)
				want = append(want, *r)
			}
			for _, o := range kernelShapeElements(fam) {
				tx.Add(o)
			}
			if _, err := k.Apply(context.Background(), tx); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			rs, err := k.Dump(context.Background(), tx.Table)
			if err != nil {
				t.Fatalf("Dump: %v", err)
			}
			got := map[string]Rule{}
			for _, r := range rs.Rules {
				r.Handle = 0
				got[r.Comment] = r
			}
			for _, w := range want {
				if g := got[w.Comment]; !reflect.DeepEqual(g, w) {
					t.Errorf("Dump rule %s:\n got %#v\nwant %#v", w.Comment, g, w)
				}
			}
			kernelCheckJSON(t, ns, fam, len(want))
			kernelCheckRoundTrip(t, ns, fam)
			kernelCheckPackedDump(t, k, rs)
		})
	}
}

// kernelCheckPackedDump: DumpPacked reads every set back as Dump does, each element packed.
func kernelCheckPackedDump(t *testing.T, k *Kernel, rs *Ruleset) {
	t.Helper()
	got := map[string][]string{}
	ps, err := k.DumpPacked(context.Background(), rs.Table, func(p Packed) {
		got[p.Set()] = append(got[p.Set()], p.ID()+" | "+p.String())
	})
	if err != nil {
		t.Fatalf("DumpPacked: %v", err)
	}
	if ps.Elements != nil {
		t.Errorf("DumpPacked filled Elements too")
	}
	if len(got) != len(rs.Elements) {
		t.Errorf("DumpPacked read %d sets with elements, Dump %d", len(got), len(rs.Elements))
	}
	for set, els := range rs.Elements {
		var want []string
		for i := range els {
			p := Pack(&els[i])
			want = append(want, p.ID()+" | "+p.String())
		}
		slices.Sort(want)
		slices.Sort(got[set])
		if !slices.Equal(got[set], want) {
			for name, l := range map[string][]string{"DumpPacked": got[set], "Dump": want} {
				for i := 1; i < len(l); i++ {
					if l[i] == l[i-1] {
						t.Errorf("%s read %q twice", name, l[i])
					}
				}
			}
			for i := range min(len(want), len(got[set])) {
				if got[set][i] != want[i] {
					t.Errorf("set %s: %d elements, want %d; first difference at %d: %q, want %q", set, len(got[set]), len(want), i, got[set][i], want[i])
					break
				}
			}
			t.Errorf("set %s: DumpPacked read\n%q\nwant (Dump's, packed)\n%q", set, got[set][:min(3, len(got[set]))], want[:min(3, len(want))])
		}
	}
	if !reflect.DeepEqual(ps.Chains, rs.Chains) || !reflect.DeepEqual(ps.Sets, rs.Sets) || len(ps.Rules) != len(rs.Rules) {
		t.Errorf("DumpPacked read other chains, sets or rules than Dump")
	}
}

// kernelCheckJSON reads the ruleset back independently through nft's JSON output.
func kernelCheckJSON(t *testing.T, ns *netns.NS, fam Family, wantRules int) {
	t.Helper()
	rules := 0
	for _, obj := range kernelNftJSON(t, ns) {
		raw, ok := obj["rule"]
		if !ok {
			continue
		}
		rules++
		var r struct {
			Comment string            `json:"comment"`
			Expr    []json.RawMessage `json:"expr"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("rule JSON: %v", err)
		}
		for _, e := range r.Expr {
			if strings.Contains(string(e), "unknown") || strings.Contains(string(e), "xt") {
				t.Errorf("rule %q: nft does not understand expression %s", r.Comment, e)
			}
		}
	}
	if rules != wantRules {
		t.Errorf("nft -j lists %d rules, want %d", rules, wantRules)
	}
}

// kernelCheckRoundTrip feeds `nft list ruleset` to `nft -f` in a fresh namespace and compares
// the listings and the bytecode.
func kernelCheckRoundTrip(t *testing.T, ns *netns.NS, fam Family) {
	t.Helper()
	text, err := ns.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	ns2 := netns.New(t, "nftk-rt")
	if _, err := ns2.RunStdin(text, "nft", "-f", "-"); err != nil {
		t.Fatalf("nft -f of our listing: %v\n%s", err, text)
	}
	text2, err := ns2.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	text, text2 = kernelExpiresRE.ReplaceAllString(text, ""), kernelExpiresRE.ReplaceAllString(text2, "")
	if d := golden.Diff(text, text2); d != "" {
		t.Errorf("listing changed after nft -f (- ours, + nft's):\n%s", d)
	}
	b1 := kernelHandleRE.ReplaceAllString(kernelNftDebugRules(t, ns, fam), "")
	b2 := kernelHandleRE.ReplaceAllString(kernelNftDebugRules(t, ns2, fam), "")
	if d := golden.Diff(b1, b2); d != "" {
		t.Errorf("bytecode differs from what nft writes for the same text (- ours, + nft's):\n%s", d)
	}
}

// kernelShapeElements puts elements of every kind into the base sets.
func kernelShapeElements(fam Family) []Object {
	a := func(v4, v6 string) Value {
		if fam == IPv6 {
			return Addr(kernelAddr(v6))
		}
		return Addr(kernelAddr(v4))
	}
	tcp, udp := Proto(unix.IPPROTO_TCP), Proto(unix.IPPROTO_UDP)
	goA := &Verdict{Kind: VerdictGoto, Chain: "svc-a"}
	return []Object{
		&Element{Set: "service-ips", Key: []Value{a("198.18.0.10", "fd00::10"), tcp, Port(80)}, KeyEnd: []Value{a("198.18.0.10", "fd00::10"), tcp, Port(80)}, Verdict: goA, Comment: "default/web:http"},
		&Element{Set: "service-ips", Key: []Value{a("198.18.0.11", "fd00::11"), udp, Port(16384)}, KeyEnd: []Value{a("198.18.0.11", "fd00::11"), udp, Port(32767)}, Verdict: goA, Comment: "default/rtp"},
		&Element{Set: "service-hash", Key: []Value{a("198.18.0.12", "fd00::12"), tcp, Port(443)}, Verdict: goA},
		&Element{Set: "allports", Key: []Value{a("198.18.0.13", "fd00::13"), tcp}, Verdict: &Verdict{Kind: VerdictDrop}},
		&Element{Set: "nodeports", Key: []Value{tcp, Port(30000)}, KeyEnd: []Value{tcp, Port(30099)}, Verdict: goA},
		&Element{Set: "pairs", Key: []Value{a("198.18.0.1", "fd00::1"), a("198.18.0.2", "fd00::2")}},
		&Element{Set: "cidrs", Key: []Value{a("198.18.0.0", "fd00::")}, KeyEnd: []Value{a("198.18.255.255", "fd00::ffff")}, Comment: "range"},
		&Element{Set: "cidrs", Key: []Value{a("198.19.1.1", "fd00::1:1")}},
		&Element{Set: "marks", Key: []Value{Mark(0x4000)}, Verdict: &Verdict{Kind: VerdictAccept}},
		&Element{Set: "affinity", Key: []Value{a("198.19.0.9", "fd00::9")}, Timeout: time.Hour},
		&Element{Set: "lb-a", Key: []Value{Int(0)}, Verdict: goA},
		&Element{Set: "lb-a", Key: []Value{Int(1)}, Verdict: &Verdict{Kind: VerdictJump, Chain: "svc-a"}},
		&Element{Set: "ep-a", Key: []Value{Int(0)}, Data: []Value{a("198.19.0.1", "fd00::1"), Port(8080)}},
		&Element{Set: "ep-a", Key: []Value{Int(1)}, Data: []Value{a("198.19.0.2", "fd00::2"), Port(8080)}},
		&Element{Set: "ep-b", Key: []Value{Int(0)}, Data: []Value{a("198.19.0.1", "fd00::1")}},
		&Element{Set: "endpoints", Key: []Value{a("198.18.0.10", "fd00::10"), tcp, Port(80), Int(2)}, Data: []Value{a("198.19.0.1", "fd00::1"), Port(8080)}},
		&Element{Set: "nodeport-endpoints", Key: []Value{udp, Port(30053), Int(0)}, Data: []Value{a("198.19.0.1", "fd00::1")}},
	}
}

func kernelErrorf(err error) *OpError {
	var oe *OpError
	if errors.As(err, &oe) {
		return oe
	}
	return nil
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
