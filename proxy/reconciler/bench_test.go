package reconciler_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// nullKernel accepts every transaction and holds nothing: the benchmarks below measure the
// reconciler's own work (fragments in, ops out), not the kernel's or the codec's.
type nullKernel struct{ nft.Interface }

func (nullKernel) Apply(context.Context, *nft.Transaction) (nft.Stats, error) {
	return nft.Stats{}, nil
}
func (nullKernel) Dump(context.Context, nft.Table) (*nft.Ruleset, error) {
	return nil, syscall.ENOENT
}

// BenchmarkFullSync10k: 10k dual-stack Services × 10 endpoints built, set and committed from
// empty: the Go share of a full sync (the kernel holds nothing and sends nothing back).
func BenchmarkFullSync10k(b *testing.B) {
	const n = 10000
	svcs := make([]*model.Service, n)
	for i := range svcs {
		svcs[i] = svc(i, 10)
	}
	for b.Loop() {
		h := newHarness(&testing.T{}, nullKernel{})
		h.put(svcs...)
		if _, err := h.rec.Commit(context.Background(), false); err != nil {
			b.Fatal(err)
		}
	}
}
