package nft

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"sort"
	"testing"

	"golang.org/x/sys/unix"
)

// TestKernelAtomicity: a batch whose 5th op is bad is refused as a whole, the error names op 4,
// and the same Kernel then applies a good batch.
func TestKernelAtomicity(t *testing.T) {
	k, ns := kernelTestNS(t, "nftk-atom")
	ctx := context.Background()
	tb := Table{Family: IPv4, Name: "nftproxy"}
	good := NewTransaction(tb)
	good.Add(&TableObj{})
	good.Add(&Chain{Name: "a"})
	if _, err := k.Apply(ctx, good); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	before, _ := ns.Run("nft", "list", "ruleset")

	cases := []struct {
		name    string
		bad     Op
		errTest func(error) bool
	}{
		{"jump to missing chain", Op{Verb: VerbAdd, Table: tb, Object: &Rule{Chain: "b", Exprs: []Expr{Verdict{Kind: VerdictJump, Chain: "missing"}}}}, IsNotFound},
		{"element of wrong set", Op{Verb: VerbAdd, Table: tb, Object: &Element{Set: "nope", Key: []Value{Port(1)}}}, IsNotFound},
		{"delete missing chain", Op{Verb: VerbDelete, Table: tb, Object: &Chain{Name: "ghost"}}, IsNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := NewTransaction(tb)
			tx.Add(&Chain{Name: "b"})
			tx.Add(&Chain{Name: "c"})
			tx.Add(&Set{Name: "s", Key: []Type{TypeInetService}})
			tx.Add(&Element{Set: "s", Key: []Value{Port(80)}})
			tx.Ops = append(tx.Ops, c.bad)
			tx.Add(&Rule{Chain: "b", Exprs: []Expr{Verdict{Kind: VerdictAccept}}})
			_, err := k.Apply(ctx, tx)
			oe := kernelErrorf(err)
			if oe == nil || oe.Index != 4 || !c.errTest(err) {
				t.Fatalf("Apply error = %v (OpError %+v), want an OpError for op 4", err, oe)
			}
			after, _ := ns.Run("nft", "list", "ruleset")
			if after != before {
				t.Errorf("kernel state changed by a refused batch:\n got %s\nwant %s", after, before)
			}
		})
	}
	tx := NewTransaction(tb)
	tx.Add(&Chain{Name: "b"})
	tx.Add(&Rule{Chain: "a", Exprs: []Expr{Verdict{Kind: VerdictJump, Chain: "b"}}})
	if _, err := k.Apply(ctx, tx); err != nil {
		t.Fatalf("good batch after refused ones: %v", err)
	}
}

// TestKernelElementErrorIndex: a bad element inside a chunked element list is named exactly.
func TestKernelElementErrorIndex(t *testing.T) {
	k, _ := kernelTestNS(t, "nftk-elerr")
	tx := NewTransaction(Table{Family: IPv4, Name: "nftproxy"})
	tx.Add(&TableObj{})
	tx.Add(&Set{Name: "m", Key: []Type{TypeInetService}, Data: []Type{TypeVerdict}})
	for p := 1; p <= 3000; p++ {
		v := &Verdict{Kind: VerdictAccept}
		if p == 2500 {
			v = &Verdict{Kind: VerdictGoto, Chain: "missing"}
		}
		tx.Add(&Element{Set: "m", Key: []Value{Port(uint16(p))}, Verdict: v})
	}
	_, err := k.Apply(context.Background(), tx)
	oe := kernelErrorf(err)
	if oe == nil || oe.Index != 2+2499 || !IsNotFound(err) {
		t.Fatalf("Apply error = %v, want an OpError for op %d (port 2500) with ENOENT", err, 2+2499)
	}
}

// kernelScaleTx is one transaction with nChains chains and an nElems-element concatenated map
// (ipv4_addr . inet_proto . inet_service : verdict) whose elements goto those chains.
func kernelScaleTx(tb Table, nChains, nElems int, interval bool) *Transaction {
	tx := NewTransaction(tb)
	tx.Add(&TableObj{})
	for i := 0; i < nChains; i++ {
		tx.Add(&Chain{Name: fmt.Sprintf("svc-%05d", i)})
	}
	tx.Add(&Set{Name: "service-ips", Key: []Type{TypeIPv4Addr, TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict}, Interval: interval})
	base := netip.MustParseAddr("198.18.0.0").As4()
	for i := 0; i < nElems; i++ {
		a := base
		a[2], a[3] = byte(i>>8), byte(i)
		a[1] += byte(i >> 16)
		key := []Value{Addr(netip.AddrFrom4(a)), Proto(unix.IPPROTO_TCP), Port(uint16(80 + i%7))}
		el := &Element{Set: "service-ips", Key: key, Verdict: &Verdict{Kind: VerdictGoto, Chain: fmt.Sprintf("svc-%05d", i%nChains)}}
		if interval {
			el.KeyEnd = key
		}
		tx.Add(el)
	}
	return tx
}

// TestKernelScale: one transaction of 10,000 chains and a 100,000-element map applies completely;
// counted back through nft's JSON and through Dump (the regression test for silent loss).
func TestKernelScale(t *testing.T) {
	if testing.Short() {
		t.Skip("scale test skipped in -short mode")
	}
	k, ns := kernelTestNS(t, "nftk-scale")
	tb := Table{Family: IPv4, Name: "nftproxy"}
	tx := kernelScaleTx(tb, 10000, 100000, false)
	st, err := k.Apply(context.Background(), tx)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	t.Logf("applied %d ops in %d messages, %d bytes, %v", st.Ops, st.Messages, st.Bytes, st.Duration)
	chains, elems := 0, 0
	for _, obj := range kernelNftJSON(t, ns) {
		if _, ok := obj["chain"]; ok {
			chains++
		}
		if raw, ok := obj["map"]; ok {
			var m struct {
				Elem []any `json:"elem"`
			}
			if err := jsonUnmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			elems += len(m.Elem)
		}
	}
	if chains != 10000 || elems != 100000 {
		t.Errorf("nft -j lists %d chains and %d elements, want 10000 and 100000", chains, elems)
	}
	rs, err := k.Dump(context.Background(), tb)
	if err != nil {
		t.Fatalf("Dump: %v", err)
	}
	if len(rs.Chains) != 10000 || len(rs.Elements["service-ips"]) != 100000 {
		t.Errorf("Dump has %d chains and %d elements, want 10000 and 100000", len(rs.Chains), len(rs.Elements["service-ips"]))
	}
}

// TestKernelDumpElements: Dump returns sets and elements as sent (keys, ends, verdicts, data,
// comments, timeouts), including single-field interval ranges reassembled from start/end pairs.
func TestKernelDumpElements(t *testing.T) {
	for _, fam := range []Family{IPv4, IPv6} {
		t.Run(fam.String(), func(t *testing.T) {
			k, _ := kernelTestNS(t, "nftk-dump")
			tx := kernelBaseTx(fam)
			var sets []Set
			for _, op := range tx.Ops {
				if s, ok := op.Object.(*Set); ok {
					sets = append(sets, *s)
				}
			}
			want := map[string][]Element{}
			for _, o := range kernelShapeElements(fam) {
				tx.Add(o)
				e := *o.(*Element)
				want[e.Set] = append(want[e.Set], e)
			}
			if _, err := k.Apply(context.Background(), tx); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			rs, err := k.Dump(context.Background(), tx.Table)
			if err != nil {
				t.Fatalf("Dump: %v", err)
			}
			sort.Slice(sets, func(i, j int) bool { return sets[i].Name < sets[j].Name })
			sort.Slice(rs.Sets, func(i, j int) bool { return rs.Sets[i].Name < rs.Sets[j].Name })
			if !reflect.DeepEqual(rs.Sets, sets) {
				t.Errorf("Dump sets:\n got %+v\nwant %+v", rs.Sets, sets)
			}
			for name, w := range want {
				for i := range w {
					if w[i].KeyEnd == nil && kernelSetByName(sets, name).Interval {
						w[i].KeyEnd = w[i].Key // a single key reads back as a one-key range
					}
				}
				sort.SliceStable(w, func(i, j int) bool { return CompareKeys(w[i].Key, w[j].Key) < 0 })
				if got := rs.Elements[name]; !reflect.DeepEqual(got, w) {
					t.Errorf("Dump elements of %s:\n got %+v\nwant %+v", name, got, w)
				}
			}
		})
	}
}

func kernelSetByName(sets []Set, name string) Set {
	for _, s := range sets {
		if s.Name == name {
			return s
		}
	}
	return Set{}
}

// TestKernelConformance runs the cases shared with the fake against the real kernel, each call
// of open in a fresh namespace.
func TestKernelConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) Interface {
		k, _ := kernelTestNS(t, "nftk-conf")
		return k
	})
}
