package nft

import (
	"context"
	"fmt"
	"testing"
)

// sizeCheckKernel is a Kernel whose every Apply first checks that the batch it sends is
// allocated at exactly its length: the first pass of encode measured what the second wrote.
type sizeCheckKernel struct {
	*Kernel
	t *testing.T
}

func (k sizeCheckKernel) Apply(ctx context.Context, tx *Transaction) (Stats, error) {
	if b, err := k.encode(ctx, tx); err == nil && cap(b.w.b) != len(b.w.b) {
		k.t.Errorf("%d ops: batch buffer of %d bytes for %d encoded, want exactly their size", len(tx.Ops), cap(b.w.b), len(b.w.b))
	}
	return k.Kernel.Apply(ctx, tx)
}

// TestKernelBatchExactSize: every transaction of the conformance cases (every object kind
// with every verb, elements of every shape in both families, table switches, refused ops) and
// the full syncs of the benchmarks encode into a batch of exactly the size measured for it.
func TestKernelBatchExactSize(t *testing.T) {
	runConformance(t, func(t *testing.T) Interface {
		k, _ := kernelTestNS(t, "nftk-size")
		return sizeCheckKernel{k, t}
	})
	for _, fam := range []Family{IPv4, IPv6} {
		tx := kernelBaseTx(fam)
		for _, o := range kernelShapeElements(fam) {
			tx.Add(o)
		}
		k := &Kernel{conn: &nlConn{}, sets: map[Table]map[string]Set{}}
		for name, tx := range map[string]*Transaction{"shapes " + fam.String(): tx,
			"full sync": benchFullSyncTx(500, 10, false), "restart shape": benchFullSyncTx(500, 10, true),
			"restart shape, packed":       packTx(benchFullSyncTx(500, 10, true)),
			"restart shape, packed lists": listTx(packTx(benchFullSyncTx(500, 10, true)))} {
			b, err := k.encode(context.Background(), tx)
			if err != nil {
				t.Fatalf("%s: encode: %v", name, err)
			}
			if cap(b.w.b) != len(b.w.b) || cap(b.msgs) != len(b.msgs) {
				t.Errorf("%s: batch buffer of %d bytes for %d encoded, %d message records for %d, want exactly their size",
					name, cap(b.w.b), len(b.w.b), cap(b.msgs), len(b.msgs))
			}
		}
	}
}

// TestKernelIntervalElementErrorIndex: a refused element of a single-field interval map, after
// ranges encoded as a start and an end element each (and one reaching the top port, which has
// no end), is named exactly: the attribute the kernel points at is counted back to its op.
func TestKernelIntervalElementErrorIndex(t *testing.T) {
	for _, bad := range []int{0, 1, 700, 1399} {
		t.Run(fmt.Sprint(bad), func(t *testing.T) {
			k, _ := kernelTestNS(t, "nftk-ivalerr")
			tx := NewTransaction(Table{Family: IPv4, Name: "nftproxy"})
			tx.Add(&TableObj{})
			tx.Add(&Chain{Name: "svc"})
			tx.Add(&Set{Name: "ports", Key: []Type{TypeInetService}, Data: []Type{TypeVerdict}, Interval: true})
			first := len(tx.Ops)
			tx.Add(&Element{Set: "ports", Key: []Value{Port(65000)}, KeyEnd: []Value{Port(65535)}, Verdict: &Verdict{Kind: VerdictAccept}})
			for i := 1; i < 1400; i++ {
				v := &Verdict{Kind: VerdictGoto, Chain: "svc"}
				el := &Element{Set: "ports", Key: []Value{Port(uint16(10 * i))}, KeyEnd: []Value{Port(uint16(10*i + 4))}, Verdict: v}
				if i%3 == 0 {
					el.KeyEnd = nil // a single port: a start and an end element too
				}
				tx.Add(el)
			}
			tx.Ops[first+bad].Object.(*Element).Verdict = &Verdict{Kind: VerdictGoto, Chain: "missing"}
			_, err := k.Apply(context.Background(), tx)
			if oe := kernelErrorf(err); oe == nil || oe.Index != first+bad || !IsNotFound(err) {
				t.Fatalf("Apply error = %v, want an OpError for op %d with ENOENT", err, first+bad)
			}
			if b, err := k.encode(context.Background(), tx); err != nil || len(b.msgs) < 3 {
				t.Fatalf("encode: %v; want the elements in more than one message (got %d messages)", err, len(b.msgs))
			}
		})
	}
}
