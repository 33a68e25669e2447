package nft

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/test/golden"
)

// kernelNumgenTx is the frontend-keyed layout's shared maps in table fam: the address map with
// "addr . port" data, the node-port map, an address-only map (the port is kept), slots of two
// frontends, and the one-rule pick chains.
func kernelNumgenTx(fam Family) *Transaction {
	a := func(v4, v6 string) Value {
		if fam == IPv6 {
			return Addr(kernelAddr(v6))
		}
		return Addr(kernelAddr(v4))
	}
	addr := fam.AddrType()
	tcp, udp := Proto(unix.IPPROTO_TCP), Proto(unix.IPPROTO_UDP)
	tx := NewTransaction(Table{Family: fam, Name: "nftproxy"})
	tx.Add(&TableObj{})
	tx.Add(&Chain{Name: "prerouting", Base: &BaseChain{Type: ChainTypeNAT, Hook: HookPrerouting, Priority: -100}})
	for _, c := range []string{"pick-3", "pick-nodeport-2", "pick-keep-1"} {
		tx.Add(&Chain{Name: c})
	}
	tx.Add(&Set{Name: "endpoints", Key: []Type{addr, TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{addr, TypeInetService}, NumgenKey: 1})
	tx.Add(&Set{Name: "nodeport-endpoints", Key: []Type{TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{addr, TypeInetService}, NumgenKey: 1, Comment: "node ports"})
	tx.Add(&Set{Name: "keep-endpoints", Key: []Type{addr, TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{addr}, NumgenKey: 2})
	for i, ep := range []Value{a("198.19.0.1", "fd00::1:1"), a("198.19.0.2", "fd00::1:2"), a("198.19.0.3", "fd00::1:3")} {
		tx.Add(&Element{Set: "endpoints", Key: []Value{a("198.18.0.10", "fd00::10"), tcp, Port(80), Int(uint32(i))}, Data: []Value{ep, Port(8080)}})
		tx.Add(&Element{Set: "endpoints", Key: []Value{a("198.18.0.11", "fd00::11"), udp, Port(53), Int(uint32(i))}, Data: []Value{ep, Port(5353)}})
	}
	tx.Add(&Element{Set: "nodeport-endpoints", Key: []Value{tcp, Port(30080), Int(0)}, Data: []Value{a("198.19.0.1", "fd00::1:1"), Port(8080)}})
	tx.Add(&Element{Set: "nodeport-endpoints", Key: []Value{tcp, Port(30080), Int(1)}, Data: []Value{a("198.19.0.2", "fd00::1:2"), Port(8080)}, Comment: "ns/web:http"})
	tx.Add(&Element{Set: "keep-endpoints", Key: []Value{a("198.18.0.12", "fd00::12"), Proto(unix.IPPROTO_SCTP), Port(9), Int(0)}, Data: []Value{a("198.19.0.4", "fd00::1:4")}})
	tx.Add(&Rule{Chain: "prerouting", Exprs: []Expr{Verdict{Kind: VerdictJump, Chain: "pick-3"}}})
	tx.Add(&Rule{Chain: "prerouting", Exprs: []Expr{Verdict{Kind: VerdictJump, Chain: "pick-nodeport-2"}}})
	tx.Add(&Rule{Chain: "prerouting", Exprs: []Expr{Verdict{Kind: VerdictJump, Chain: "pick-keep-1"}}})
	tx.Add(&Rule{Chain: "pick-3", Exprs: []Expr{DNATNumgen{Modulus: 3, Map: "endpoints", WithPort: true, Key: DNATNumgenKeyAddr}}})
	tx.Add(&Rule{Chain: "pick-nodeport-2", Exprs: []Expr{DNATNumgen{Modulus: 2, Map: "nodeport-endpoints", WithPort: true, Key: DNATNumgenKeyPort}}, Comment: "node ports"})
	tx.Add(&Rule{Chain: "pick-keep-1", Exprs: []Expr{DNATNumgen{Modulus: 1, Map: "keep-endpoints", Key: DNATNumgenKeyAddr}}})
	return tx
}

// TestKernelNumgenKeyedMaps applies the frontend-keyed maps and pick rules in ip and ip6 tables
// and checks that Dump returns exactly what the Fake holds for the same transaction (NumgenKey,
// element byte order and padding, the rules' Key); that nft itself reads the same maps, elements
// and rules (`nft -j list ruleset`); and that `nft -f` of our rendered text, in a second
// namespace, leaves byte-identical kernel state: set attributes and userdata, elements, rule
// bytecode.
func TestKernelNumgenKeyedMaps(t *testing.T) {
	ctx := context.Background()
	for _, fam := range []Family{IPv4, IPv6} {
		t.Run(fam.String(), func(t *testing.T) {
			k, ns := kernelTestNS(t, "nftk-ngkey")
			tx := kernelNumgenTx(fam)
			if _, err := k.Apply(ctx, tx); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			f := NewFake()
			if _, err := f.Apply(ctx, kernelNumgenTx(fam)); err != nil {
				t.Fatalf("Fake Apply: %v", err)
			}
			got, err := k.Dump(ctx, tx.Table)
			if err != nil {
				t.Fatalf("Dump: %v", err)
			}
			want, _ := f.Dump(ctx, tx.Table)
			if d := Diff(want, got); d != "" {
				t.Fatalf("Dump differs from the Fake (- fake, + kernel):\n%s", d)
			}
			for _, s := range got.Sets {
				if s.NumgenKey == 0 {
					t.Errorf("set %s read back without NumgenKey", s.Name)
				}
			}

			// nft's own reading of the kernel state.
			if js, ws := kernelNumgenJSON(t, kernelNftJSON(t, ns)), kernelNumgenExpectJSON(fam, want); js != ws {
				t.Errorf("nft -j list ruleset (- want, + nft):\n%s", golden.Diff(ws, js))
			}

			// nft -f of the rendered text: byte-identical kernel state.
			text := Render(got)
			k2, ns2 := kernelTestNS(t, "nftk-ngkey-nft")
			if _, err := ns2.RunStdin(text, "nft", "-f", "-"); err != nil {
				t.Fatalf("nft -f of the rendered text: %v\n%s", err, text)
			}
			ours, theirs := kernelRawState(t, k, tx.Table), kernelRawState(t, k2, tx.Table)
			if ours != theirs {
				t.Errorf("kernel state differs from nft -f of the same text (- nft, + ours):\n%s", golden.Diff(theirs, ours))
			}
		})
	}
}

// kernelRawState lists, as sorted hex lines, every attribute the kernel reports for the sets,
// elements and rules of table tb, except handles and rule positions (allocated, not chosen).
func kernelRawState(t *testing.T, k *Kernel, tb Table) string {
	t.Helper()
	ctx := context.Background()
	var lines, sets []string
	attrs := func(prefix string, b []byte, skip ...uint16) {
		for _, a := range nlParseAttrs(b) {
			if !slices.Contains(skip, a.typ&^nlAttrNested) {
				lines = append(lines, fmt.Sprintf("%s attr %d: %s", prefix, a.typ&^nlAttrNested, hex.EncodeToString(a.data)))
			}
		}
	}
	err := k.conn.dump(ctx, unix.NFT_MSG_GETSET, tb.Family, func(w *nlBuf) { w.str(unix.NFTA_SET_TABLE, tb.Name) }, func(m nlMsg) error {
		a := nlAttrMap(m.data[nlNfgenLen:])
		name := nlStr(a[unix.NFTA_SET_NAME])
		sets = append(sets, name)
		attrs("set "+name, m.data[nlNfgenLen:], 16) // NFTA_SET_HANDLE
		return nil
	})
	if err != nil {
		t.Fatalf("dump sets: %v", err)
	}
	for _, s := range sets {
		err := k.conn.dump(ctx, unix.NFT_MSG_GETSETELEM, tb.Family, func(w *nlBuf) {
			w.str(unix.NFTA_SET_ELEM_LIST_TABLE, tb.Name)
			w.str(unix.NFTA_SET_ELEM_LIST_SET, s)
		}, func(m nlMsg) error {
			for _, e := range nlParseAttrs(nlAttrMap(m.data[nlNfgenLen:])[unix.NFTA_SET_ELEM_LIST_ELEMENTS]) {
				lines = append(lines, fmt.Sprintf("element of %s: %s", s, hex.EncodeToString(e.data)))
			}
			return nil
		})
		if err != nil {
			t.Fatalf("dump elements of %s: %v", s, err)
		}
	}
	err = k.conn.dump(ctx, unix.NFT_MSG_GETRULE, tb.Family, func(w *nlBuf) { w.str(unix.NFTA_RULE_TABLE, tb.Name) }, func(m nlMsg) error {
		a := nlAttrMap(m.data[nlNfgenLen:])
		attrs("rule in "+nlStr(a[unix.NFTA_RULE_CHAIN]), m.data[nlNfgenLen:], unix.NFTA_RULE_HANDLE, unix.NFTA_RULE_POSITION)
		return nil
	})
	if err != nil {
		t.Fatalf("dump rules: %v", err)
	}
	if len(lines) == 0 {
		t.Fatalf("table %s holds nothing", tb)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// kernelNumgenJSON summarises nft's JSON listing of the maps, their elements and the dnat rules
// as lines: "map NAME TYPES : DATA", "elem NAME K . E . Y : D . A", "rule CHAIN dnat ...".
func kernelNumgenJSON(t *testing.T, objs []map[string]json.RawMessage) string {
	t.Helper()
	scalar := func(raw json.RawMessage) string {
		var c struct {
			Concat []any `json:"concat"`
		}
		if json.Unmarshal(raw, &c) == nil && c.Concat != nil {
			parts := make([]string, len(c.Concat))
			for i, p := range c.Concat {
				parts[i] = fmt.Sprint(p)
			}
			return strings.Join(parts, " . ")
		}
		var v any
		_ = json.Unmarshal(raw, &v)
		return fmt.Sprint(v)
	}
	var lines []string
	for _, o := range objs {
		if raw, ok := o["map"]; ok {
			var m struct {
				Name string              `json:"name"`
				Type []string            `json:"type"`
				Map  string              `json:"map"`
				Elem [][]json.RawMessage `json:"elem"`
			}
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatalf("map JSON: %v", err)
			}
			lines = append(lines, fmt.Sprintf("map %s %s : %s", m.Name, strings.Join(m.Type, " . "), m.Map))
			for _, e := range m.Elem {
				key := e[0]
				var withComment struct {
					Elem struct {
						Val json.RawMessage `json:"val"`
					} `json:"elem"`
				}
				if json.Unmarshal(key, &withComment) == nil && withComment.Elem.Val != nil {
					key = withComment.Elem.Val
				}
				lines = append(lines, fmt.Sprintf("elem %s %s : %s", m.Name, scalar(key), scalar(e[1])))
			}
		}
		if raw, ok := o["rule"]; ok {
			var r struct {
				Chain string `json:"chain"`
				Expr  []struct {
					Dnat *struct {
						Family string `json:"family"`
						Addr   struct {
							Map struct {
								Key struct {
									Concat []map[string]map[string]any `json:"concat"`
								} `json:"key"`
								Data string `json:"data"`
							} `json:"map"`
						} `json:"addr"`
					} `json:"dnat"`
				} `json:"expr"`
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatalf("rule JSON: %v", err)
			}
			for _, e := range r.Expr {
				if e.Dnat == nil {
					continue
				}
				var key []string
				for _, c := range e.Dnat.Addr.Map.Key.Concat {
					for kind, f := range c {
						key = append(key, fmt.Sprintf("%s(%v %v %v %v)", kind, f["protocol"], f["field"], f["key"], f["mod"]))
					}
				}
				lines = append(lines, fmt.Sprintf("rule %s dnat %q %s map %s", r.Chain, e.Dnat.Family, strings.Join(key, " . "), e.Dnat.Addr.Map.Data))
			}
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// kernelNumgenExpectJSON is what kernelNumgenJSON must give for rs.
func kernelNumgenExpectJSON(fam Family, rs *Ruleset) string {
	var lines []string
	types := func(ts []Type) string {
		parts := make([]string, len(ts))
		for i, t := range ts {
			parts[i] = t.String()
		}
		return strings.Join(parts, " . ")
	}
	vals := func(vs []Value) string {
		parts := make([]string, len(vs))
		for i, v := range vs {
			parts[i] = renderValue(v)
		}
		return strings.Join(parts, " . ")
	}
	for _, s := range rs.Sets {
		lines = append(lines, fmt.Sprintf("map %s %s : %s", s.Name, types(s.Key), types(s.Data)))
		for _, e := range rs.Elements[s.Name] {
			lines = append(lines, fmt.Sprintf("elem %s %s : %s", s.Name, vals(e.Key), vals(e.Data)))
		}
	}
	for _, r := range rs.Rules {
		for _, e := range r.Exprs {
			d, ok := e.(DNATNumgen)
			if !ok {
				continue
			}
			famName := ""
			if d.WithPort {
				famName = fam.String()
			}
			var key []string
			for _, f := range d.Key {
				switch f {
				case FieldDaddr:
					key = append(key, fmt.Sprintf("payload(%s daddr <nil> <nil>)", fam))
				case FieldL4Proto:
					key = append(key, "meta(<nil> <nil> l4proto <nil>)")
				case FieldDport:
					key = append(key, "payload(th dport <nil> <nil>)")
				}
			}
			key = append(key, fmt.Sprintf("numgen(<nil> <nil> <nil> %d)", d.Modulus))
			lines = append(lines, fmt.Sprintf("rule %s dnat %q %s map @%s", r.Chain, famName, strings.Join(key, " . "), d.Map))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}
