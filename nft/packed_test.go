package nft

import (
	"context"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// packedCases are elements of every shape a packing must carry: both address forms, an address
// type holding no address, numbers of every width, ends equal to and unlike the key, data,
// verdicts with and without a chain, comments and timeouts.
func packedCases() []Element {
	a4, b4 := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.0.9")
	a6 := netip.MustParseAddr("fd00::1")
	return []Element{
		{Set: "endpoints", Key: []Value{Addr(a4), Proto(unix.IPPROTO_TCP), Port(30000), Int(9)},
			Data: []Value{Addr(b4), Port(8080)}},
		{Set: "endpoints", Key: []Value{Addr(a6), Proto(unix.IPPROTO_UDP), Port(53), Int(0)},
			Data: []Value{Addr(a6), Port(65535)}},
		{Set: "service-ips", Key: []Value{Addr(a4), Proto(unix.IPPROTO_TCP), Port(80)},
			Verdict: &Verdict{Kind: VerdictGoto, Chain: "pick-3"}, Comment: "ns/name:http"},
		{Set: "drops", Key: []Value{Addr(a4)}, Verdict: &Verdict{Kind: VerdictDrop}},
		{Set: "ranges", Key: []Value{Addr(a4), Port(16384)}, KeyEnd: []Value{Addr(a4), Port(32767)}},
		{Set: "marks", Key: []Value{Mark(0xffffffff)}, Timeout: 3 * time.Hour},
		{Set: "odd", Key: []Value{{Type: TypeIPv4Addr}, {Type: TypeInvalid, Num: 1 << 31}}},
		{Set: "", Key: nil},
	}
}

func TestPackedRoundTrip(t *testing.T) {
	for _, e := range packedCases() {
		p := Pack(&e)
		if got := p.Unpack(); !reflect.DeepEqual(got, e) {
			t.Errorf("Unpack(Pack(%+v)) = %+v", e, got)
		}
		if got := p.Set(); got != e.Set {
			t.Errorf("Set() = %q, want %q", got, e.Set)
		}
		if !strings.HasPrefix(p.String(), p.ID()) {
			t.Errorf("ID %q is not a prefix of the packing %q", p.ID(), p.String())
		}
		// Reused storage gives the same element.
		var sc elementScratch
		sc.vals = make([]Value, 0, 1) // too small: unpacking must grow it without losing values
		if got := sc.of(&p); !reflect.DeepEqual(*got, e) {
			t.Errorf("scratch unpack = %+v, want %+v", *got, e)
		}
	}
}

// TestPackedIdentity: the ID is the kernel's identity of an element (set and key; an end equal
// to the key is no end), and the whole packing differs exactly when the element does.
func TestPackedIdentity(t *testing.T) {
	a := netip.MustParseAddr("198.18.0.1")
	key := []Value{Addr(a), Port(80)}
	base := Element{Set: "s", Key: key, Data: []Value{Addr(a), Port(8080)}}
	sameEnd := base
	sameEnd.KeyEnd = []Value{Addr(a), Port(80)}
	if p, q := Pack(&base), Pack(&sameEnd); p.String() != q.String() {
		t.Errorf("an end equal to the key packs differently: %q vs %q", p.String(), q.String())
	}
	for name, change := range map[string]func(e *Element){
		"data":    func(e *Element) { e.Data = []Value{Addr(a), Port(8081)} },
		"comment": func(e *Element) { e.Comment = "x" },
		"timeout": func(e *Element) { e.Timeout = time.Second },
		"verdict": func(e *Element) { e.Data = nil; e.Verdict = &Verdict{Kind: VerdictGoto, Chain: "c"} },
	} {
		e := base
		change(&e)
		p, q := Pack(&base), Pack(&e)
		if p.ID() != q.ID() {
			t.Errorf("%s: the ID changed with the value: %q vs %q", name, p.ID(), q.ID())
		}
		if p.String() == q.String() {
			t.Errorf("%s: the packing did not change", name)
		}
	}
	for name, change := range map[string]func(e *Element){
		"set":  func(e *Element) { e.Set = "t" },
		"key":  func(e *Element) { e.Key = []Value{Addr(a), Port(81)} },
		"type": func(e *Element) { e.Key = []Value{Addr(a), Int(80)} },
		"end":  func(e *Element) { e.KeyEnd = []Value{Addr(a), Port(90)} },
	} {
		e := base
		change(&e)
		if p, q := Pack(&base), Pack(&e); p.ID() == q.ID() {
			t.Errorf("%s: the ID did not change: %q", name, p.ID())
		}
	}
}

// TestPackedAllocs: the encoder's scratch unpacks a packed element without allocating.
func TestPackedAllocs(t *testing.T) {
	ps := make([]Packed, 0, len(packedCases()))
	for _, e := range packedCases() {
		ps = append(ps, Pack(&e))
	}
	var sc elementScratch
	for i := range ps {
		sc.of(&ps[i]) // grow the scratch once
	}
	if n := testing.AllocsPerRun(10, func() {
		for i := range ps {
			sc.of(&ps[i])
		}
	}); n != 0 {
		t.Errorf("unpacking into the scratch allocates %.0f objects, want 0", n)
	}
}

// packTx returns tx with every element op's object packed.
func packTx(tx *Transaction) *Transaction {
	out := &Transaction{Table: tx.Table, Ops: make([]Op, len(tx.Ops))}
	for i, op := range tx.Ops {
		if e, ok := op.Object.(*Element); ok {
			p := Pack(e)
			op.Object = &p
		}
		out.Ops[i] = op
	}
	return out
}

// listTx returns tx with every run of consecutive packed element ops of one verb and table as
// one Op on a PackedList.
func listTx(tx *Transaction) *Transaction {
	out := &Transaction{Table: tx.Table}
	for _, op := range tx.Ops {
		p, ok := op.Object.(*Packed)
		if !ok {
			out.Ops = append(out.Ops, op)
			continue
		}
		if n := len(out.Ops); n > 0 {
			if l, ok := out.Ops[n-1].Object.(*PackedList); ok && out.Ops[n-1].Verb == op.Verb && out.Ops[n-1].Table == op.Table {
				l.Elements = append(l.Elements, p)
				continue
			}
		}
		out.Ops = append(out.Ops, Op{Verb: op.Verb, Table: op.Table, Object: &PackedList{Elements: []*Packed{p}}})
	}
	return out
}

// TestPackedOpsEqualElementOps: a transaction of packed elements, one Op each or all in a
// PackedList, leaves the kernel, the Fake and the renderer exactly where the same elements
// unpacked do.
func TestPackedOpsEqualElementOps(t *testing.T) {
	plain := Table{Family: IPv4, Name: "plain"}
	packed := Table{Family: IPv4, Name: "packed"}
	for _, form := range []struct {
		name string
		tx   func(*Transaction) *Transaction
	}{{"packed", packTx}, {"packed list", func(tx *Transaction) *Transaction { return listTx(packTx(tx)) }}} {
		if got, want := RenderTransaction(form.tx(allocTx(plain, 50))), RenderTransaction(allocTx(plain, 50)); got != want {
			t.Errorf("%s: transaction renders differently:\n%s\nwant\n%s", form.name, got, want)
		}
		for _, name := range []string{"fake", "kernel"} {
			t.Run(form.name+"/"+name, func(t *testing.T) {
				var k Interface = NewFake()
				if name == "kernel" {
					k, _ = kernelTestNS(t, "nftpk")
				}
				packedOpsEqual(t, k, plain, packed, form.tx)
			})
		}
	}
}

func packedOpsEqual(t *testing.T, k Interface, plain, packed Table, form func(*Transaction) *Transaction) {
	ctx := context.Background()
	name := ""
	{
		if _, err := k.Apply(ctx, allocTx(plain, 50)); err != nil {
			t.Fatalf("%s: apply plain: %v", name, err)
		}
		if _, err := k.Apply(ctx, form(allocTx(packed, 50))); err != nil {
			t.Fatalf("%s: apply packed: %v", name, err)
		}
		a, err := k.Dump(ctx, plain)
		if err != nil {
			t.Fatal(err)
		}
		b, err := k.Dump(ctx, packed)
		if err != nil {
			t.Fatal(err)
		}
		a.Table, b.Table = Table{}, Table{}
		if got, want := Render(b), Render(a); got != want {
			t.Errorf("%s: the packed transaction left\n%s\nwant\n%s", name, got, want)
		}
		// Deleting packed elements works too.
		del := NewTransaction(packed)
		for _, op := range packTx(allocTx(packed, 50)).Ops {
			if _, ok := op.Object.(*Packed); ok {
				del.Delete(op.Object)
			}
		}
		if _, err := k.Apply(ctx, form(del)); err != nil {
			t.Fatalf("%s: delete packed: %v", name, err)
		}
		if b, err = k.Dump(ctx, packed); err != nil {
			t.Fatal(err)
		}
		for set, els := range b.Elements {
			if len(els) > 0 {
				t.Errorf("%s: set %s still holds %d elements after deleting them packed", name, set, len(els))
			}
		}
	}
}

// TestKernelDumpPackedLarge: a set whose packings span several of DumpPacked's shared strings
// reads back as Dump reads it.
func TestKernelDumpPackedLarge(t *testing.T) {
	k, _ := kernelTestNS(t, "nftpk-large")
	tb := Table{Family: IPv4, Name: "large"}
	if _, err := k.Apply(context.Background(), allocTx(tb, 20000)); err != nil {
		t.Fatal(err)
	}
	// Right after 20,000 inserts the kernel may still be growing the set's hash table (in a
	// deferred worker), and a dump taken meanwhile, which resumes its walk for every reply, can
	// list an element twice and miss another (seen under -race, where everything is slower).
	rs := dumpStable(t, k, tb)
	if n := len(rs.Elements["endpoints"]); n != 20000 {
		t.Fatalf("Dump read %d endpoint elements, want 20000", n)
	}
	kernelCheckPackedDump(t, k, rs)
}

// TestPackedListErrorIndex: a refused element inside a PackedList is named by its operation's
// index as All numbers it (each element of the list one), by the kernel and the Fake, and
// Transaction.Op of that index is the element.
func TestPackedListErrorIndex(t *testing.T) {
	for _, name := range []string{"fake", "kernel"} {
		t.Run(name, func(t *testing.T) {
			var k Interface = NewFake()
			if name == "kernel" {
				k, _ = kernelTestNS(t, "nftpk-err")
			}
			tx := NewTransaction(Table{Family: IPv4, Name: "nftproxy"})
			tx.Add(&TableObj{})
			tx.Add(&Chain{Name: "svc"})
			tx.Add(&Set{Name: "m", Key: []Type{TypeInetService}, Data: []Type{TypeVerdict}})
			var els []*Packed
			for p := 1; p <= 3000; p++ {
				v := &Verdict{Kind: VerdictGoto, Chain: "svc"}
				if p == 2500 {
					v.Chain = "missing"
				}
				el := Pack(&Element{Set: "m", Key: []Value{Port(uint16(p))}, Verdict: v})
				els = append(els, &el)
			}
			tx.Add(&PackedList{Elements: els[:1000]})
			tx.Add(&Rule{Chain: "svc", Exprs: []Expr{Verdict{Kind: VerdictAccept}}})
			tx.Add(&PackedList{Elements: els[1000:]})
			want := 3 + 1 + 2499 // the table, chain and set; the rule; then port 2500
			_, err := k.Apply(context.Background(), tx)
			oe := kernelErrorf(err)
			if oe == nil || oe.Index != want || !IsNotFound(err) {
				t.Fatalf("Apply error = %v, want an OpError for op %d (port 2500) with ENOENT", err, want)
			}
			if p, ok := tx.Op(oe.Index).Object.(*Packed); !ok || p != els[2499] {
				t.Errorf("tx.Op(%d) = %+v, want the element of port 2500", oe.Index, tx.Op(oe.Index))
			}
			if !strings.Contains(oe.Error(), "2500 : goto missing") {
				t.Errorf("error %q does not show the refused element", oe)
			}
		})
	}
}
