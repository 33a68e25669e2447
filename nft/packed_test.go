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

// TestPackedOpsEqualElementOps: a transaction of packed elements leaves the kernel, the Fake and
// the renderer exactly where the same elements unpacked do.
func TestPackedOpsEqualElementOps(t *testing.T) {
	plain := Table{Family: IPv4, Name: "plain"}
	packed := Table{Family: IPv4, Name: "packed"}
	if got, want := RenderTransaction(packTx(allocTx(plain, 50))), RenderTransaction(allocTx(plain, 50)); got != want {
		t.Errorf("packed transaction renders differently:\n%s\nwant\n%s", got, want)
	}
	for _, name := range []string{"fake", "kernel"} {
		t.Run(name, func(t *testing.T) {
			var k Interface = NewFake()
			if name == "kernel" {
				k, _ = kernelTestNS(t, "nftpk")
			}
			packedOpsEqual(t, k, plain, packed)
		})
	}
}

func packedOpsEqual(t *testing.T, k Interface, plain, packed Table) {
	ctx := context.Background()
	name := ""
	{
		if _, err := k.Apply(ctx, allocTx(plain, 50)); err != nil {
			t.Fatalf("%s: apply plain: %v", name, err)
		}
		if _, err := k.Apply(ctx, packTx(allocTx(packed, 50))); err != nil {
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
		if _, err := k.Apply(ctx, del); err != nil {
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
	// Compare once two dumps in a row agree.
	var rs *Ruleset
	for i := 0; rs == nil; i++ {
		a, err := k.Dump(context.Background(), tb)
		if err != nil {
			t.Fatal(err)
		}
		b, err := k.Dump(context.Background(), tb)
		if err != nil {
			t.Fatal(err)
		}
		if Render(a) == Render(b) {
			rs = b
		} else if i == 20 {
			t.Fatal("20 pairs of dumps in a row disagreed")
		} else {
			t.Logf("two dumps in a row disagreed; trying again")
			time.Sleep(50 * time.Millisecond)
		}
	}
	if n := len(rs.Elements["endpoints"]); n != 20000 {
		t.Fatalf("Dump read %d endpoint elements, want 20000", n)
	}
	kernelCheckPackedDump(t, k, rs)
}
