package nft

import (
	"context"
	"net/netip"
	"testing"
	"time"

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

// BenchmarkKernelScaleApply applies one transaction of 10,000 chains and a 100,000-element
// concatenated verdict map (kernelScaleTx) to an empty table in a private namespace (root only),
// deleting the table again between runs, untimed. kernel-ns/op is the kernel's share
// (Stats.Duration: first byte sent to its answer); build-ns is building the Go ops, once.
//
//	go test -run '^$' -bench KernelScaleApply -benchtime 5x ./nft/
func BenchmarkKernelScaleApply(b *testing.B) {
	k, _ := kernelTestNS(b, "nftb-scale")
	ctx := context.Background()
	tb := Table{Family: IPv4, Name: "nftproxy"}
	start := time.Now()
	tx := kernelScaleTx(tb, 10000, 100000, false)
	build := time.Since(start)
	del := NewTransaction(tb)
	del.Delete(&TableObj{})
	var kernel time.Duration
	var st Stats
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var err error
		if st, err = k.Apply(ctx, tx); err != nil {
			b.Fatalf("Apply: %v", err)
		}
		kernel += st.Duration
		b.StopTimer()
		if _, err := k.Apply(ctx, del); err != nil {
			b.Fatalf("delete table: %v", err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(float64(kernel.Nanoseconds())/float64(b.N), "kernel-ns/op")
	b.ReportMetric(float64(build.Nanoseconds()), "build-ns")
	b.ReportMetric(float64(st.Messages), "messages")
	b.ReportMetric(float64(st.Bytes)/1e6, "MB-sent")
}

// BenchmarkKernelElementChange adds one element to a 100,000-element map and deletes it again,
// each in a transaction of its own, for the hash map and the interval (pipapo) map: the cost of
// a partial sync's smallest change as the map grows. add-ns/op and del-ns/op are the kernel's
// share of each (Stats.Duration).
//
//	go test -run '^$' -bench KernelElementChange -benchtime 7x ./nft/
func BenchmarkKernelElementChange(b *testing.B) {
	for _, interval := range []bool{false, true} {
		name := "hash"
		if interval {
			name = "interval"
		}
		b.Run(name, func(b *testing.B) {
			k, _ := kernelTestNS(b, "nftb-elem")
			ctx := context.Background()
			tb := Table{Family: IPv4, Name: "nftproxy"}
			if _, err := k.Apply(ctx, kernelScaleTx(tb, 100, 100000, interval)); err != nil {
				b.Fatal(err)
			}
			key := []Value{Addr(netip.MustParseAddr("198.19.255.1")), Proto(unix.IPPROTO_UDP), Port(1000)}
			el := &Element{Set: "service-ips", Key: key, Verdict: &Verdict{Kind: VerdictGoto, Chain: "svc-00001"}}
			if interval {
				el.KeyEnd = key
			}
			add, del := NewTransaction(tb), NewTransaction(tb)
			add.Add(el)
			del.Delete(el)
			var adds, dels time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				st, err := k.Apply(ctx, add)
				if err != nil {
					b.Fatal(err)
				}
				adds += st.Duration
				if st, err = k.Apply(ctx, del); err != nil {
					b.Fatal(err)
				}
				dels += st.Duration
			}
			b.StopTimer()
			b.ReportMetric(float64(adds.Nanoseconds())/float64(b.N), "add-ns/op")
			b.ReportMetric(float64(dels.Nanoseconds())/float64(b.N), "del-ns/op")
		})
	}
}
