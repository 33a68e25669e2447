package nft

import (
	"context"
	"testing"

	"github.com/nftproxy/nftproxy/test/netns"
	"golang.org/x/sys/unix"
)

// BenchmarkApplyFullSync applies the 10k-Service full sync of BenchmarkEncodeFullSync to a
// kernel in a private namespace (root only) and deletes the table again between runs, untimed:
// encoding, the one sendmsg, the kernel's commit and the drain of its replies. Against
// BenchmarkEncodeFullSync it shows what the socket layer adds (README.md, "Why our own socket
// code").
func BenchmarkApplyFullSync(b *testing.B) {
	ns := netns.New(b, "nftb-apply")
	k, err := NewKernel(WithNetNS(ns.Fd()))
	if err != nil {
		b.Fatalf("NewKernel: %v", err)
	}
	defer k.Close()
	ctx := context.Background()
	tx := benchFullSyncTx(benchServices, benchEndpoints, false)
	del := NewTransaction(tx.Table)
	del.Delete(&TableObj{})
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := k.Apply(ctx, tx); err != nil {
			b.Fatalf("Apply: %v", err)
		}
		b.StopTimer()
		if _, err := k.Apply(ctx, del); err != nil {
			b.Fatalf("delete table: %v", err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	benchCPU(b, ru, b.N)
}
