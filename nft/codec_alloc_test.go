package nft

import (
	"context"
	"fmt"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The tests of this file guard the property the benchmarks measure: encoding and decoding an
// element allocates nothing of its own, so a full sync's garbage does not grow with the
// cluster. They count allocations (deterministic), never time.

// allocTx is a table with an endpoint map of n elements and a verdict map of n/10 elements
// whose verdicts name one chain.
func allocTx(tb Table, n int) *Transaction {
	a := tb.Family.AddrType()
	tx := NewTransaction(tb)
	tx.Add(&TableObj{})
	tx.Add(&Chain{Name: "pick-10"})
	tx.Add(&Set{Name: "endpoints", Key: []Type{a, TypeInetProto, TypeInetService, TypeInteger},
		Data: []Type{a, TypeInetService}, NumgenKey: 1})
	tx.Add(&Set{Name: "service-ips", Key: []Type{a, TypeInetProto, TypeInetService}, Data: []Type{TypeVerdict}})
	for i := 0; i < n; i++ {
		tx.Add(&Element{Set: "endpoints",
			Key:  []Value{Addr(benchAddr(198, 18, i/10)), Proto(unix.IPPROTO_TCP), Port(80), Int(uint32(i % 10))},
			Data: []Value{Addr(benchAddr(198, 19, i)), Port(8080)}})
	}
	for i := 0; i < n/10; i++ {
		tx.Add(&Element{Set: "service-ips", Key: []Value{Addr(benchAddr(198, 18, i)), Proto(unix.IPPROTO_TCP), Port(80)},
			Verdict: &Verdict{Kind: VerdictGoto, Chain: "pick-10"}})
	}
	return tx
}

// TestEncodeAllocsPerElement: encoding 4,000 more elements allocates (almost) nothing more, and
// the batch buffer is allocated once, of exactly the batch's size; for elements given as they
// are and packed (the reconciler's form, unpacked into the encoder's scratch).
func TestEncodeAllocsPerElement(t *testing.T) {
	for _, packed := range []bool{false, true} {
		tb := Table{Family: IPv4, Name: "nftproxy"}
		k := &Kernel{conn: &nlConn{}, sets: map[Table]map[string]Set{}}
		ctx := context.Background()
		allocs := map[int]float64{}
		for _, n := range []int{1000, 5000} {
			tx := allocTx(tb, n)
			if packed {
				tx = packTx(tx)
			}
			allocs[n] = testing.AllocsPerRun(3, func() {
				if _, err := k.encode(ctx, tx); err != nil {
					t.Fatal(err)
				}
			})
			b, err := k.encode(ctx, tx)
			if err != nil {
				t.Fatal(err)
			}
			if cap(b.w.b) != len(b.w.b) {
				t.Errorf("packed %v, %d elements: batch buffer of %d bytes for %d encoded, want exactly their size", packed, n, cap(b.w.b), len(b.w.b))
			}
		}
		if extra := allocs[5000] - allocs[1000]; extra > 20 {
			t.Errorf("packed %v: encoding 4,400 more element ops allocates %.0f more objects (%.0f for 1,100, %.0f for 5,500), want at most 20",
				packed, extra, allocs[1000], allocs[5000])
		}
	}
}

// TestKernelDumpAllocsPerElement: reading back 4,400 more elements allocates only their slabs
// (a few objects per 4,096 values), nothing per element.
func TestKernelDumpAllocsPerElement(t *testing.T) {
	k, _ := kernelTestNS(t, "nftk-allocs")
	ctx := context.Background()
	allocs := map[int]float64{}
	for _, n := range []int{1000, 5000} {
		tb := Table{Family: IPv4, Name: fmt.Sprintf("t%d", n)}
		if _, err := k.Apply(ctx, allocTx(tb, n)); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		var rs *Ruleset
		allocs[n] = testing.AllocsPerRun(3, func() {
			var err error
			if rs, err = k.Dump(ctx, tb); err != nil {
				t.Fatal(err)
			}
		})
		if got := len(rs.Elements["endpoints"]) + len(rs.Elements["service-ips"]); got != n+n/10 {
			t.Fatalf("Dump of %s: %d elements, want %d", tb, got, n+n/10)
		}
	}
	if extra := allocs[5000] - allocs[1000]; extra > 100 {
		t.Errorf("reading back 4,400 more elements allocates %.0f more objects (%.0f for 1,100, %.0f for 5,500), want at most 100",
			extra, allocs[1000], allocs[5000])
	}
}

// TestValueSize: a Value stays 32 bytes (its fields ordered so; Type first made it 40), since a
// read-back table and the desired state each hold millions.
func TestValueSize(t *testing.T) {
	if got := unsafe.Sizeof(Value{}); got > 32 {
		t.Errorf("Value takes %d bytes, want at most 32: keep Type after Addr and Num", got)
	}
}
