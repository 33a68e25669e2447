package proxier

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/netns"
)

// BenchmarkServiceCost measures, on the real kernel in a fresh namespace beside 200 small
// Services, the partial sync that adds one big Service of each shape (ports × endpoints, with
// or without ClientIP affinity), with its Cost (what --max-service-cost bounds), and the sync
// of one small Service that follows it (its own transaction). bench/README.md, "What one
// Service costs", holds the figures:
//
//	go test -run '^$' -bench BenchmarkServiceCost -benchtime 3x ./proxy/proxier/
func BenchmarkServiceCost(b *testing.B) {
	shapes := []struct {
		ports, eps int
		affinity   bool
	}{{1, 1000, false}, {10, 1000, false}, {250, 100, false}, {250, 400, false}, {1, 200, true}, {10, 100, true}, {25, 100, true}}
	for _, sh := range shapes {
		b.Run(fmt.Sprintf("ports=%d/endpoints=%d/affinity=%v", sh.ports, sh.eps, sh.affinity), func(b *testing.B) {
			netns.Skip(b)
			ns := netns.New(b, "nftp-cost")
			k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { k.Close() })
			tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
			for i := 0; i < 200; i++ {
				addService(tr, fmt.Sprintf("s%d", i), i)
			}
			bd, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
			if err != nil {
				b.Fatal(err)
			}
			p := New(tr, k, []*ruleset.Builder{bd}, nil, logr.Discard(), time.Now)
			p.SetMaxServiceCost(0)
			ctx := context.Background()
			if _, err := p.Sync(ctx, true); err != nil {
				b.Fatal(err)
			}
			key := model.ServiceKey{Namespace: "default", Name: "big"}
			cost, ops := 0, 0
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s, sl := bigService("big", "198.19.1.1", sh.ports, sh.eps)
				if sh.affinity {
					affinity(s)
				}
				tr.UpsertService(s)
				tr.UpsertEndpointSlice(sl)
				res, err := p.Sync(ctx, false)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				ops = res.Ops
				cost = 0
				for _, bd := range p.builders {
					f := bd.Service(nil, tr.Service(key))
					cost += f.Cost()
				}
				tr.DeleteService(key)
				tr.DeleteEndpointSlice("default", "big-abc")
				if _, err := p.Sync(ctx, false); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(cost), "cost")
			b.ReportMetric(float64(ops), "ops")
		})
	}
}

// BenchmarkCheapBesideExpensive measures, on the real kernel beside 200 small Services, a sync
// that carries an expensive change (a Service of 250 ports × 400 endpoints appears, cost
// ~200,000, the bound lifted) and a cheap one (a small Service's endpoint replaced): how long
// the cheap change takes to be committed (cheap-ms, from the Observer's programming latency)
// and the whole sync (ns/op). "own" is nftproxy's way (the expensive change in a transaction of
// its own, after the cheap one); "one" puts both in one transaction, as before it:
//
//	go test -run '^$' -bench BenchmarkCheapBesideExpensive -benchtime 3x ./proxy/proxier/
func BenchmarkCheapBesideExpensive(b *testing.B) {
	for _, mode := range []string{"own", "one"} {
		b.Run(mode, func(b *testing.B) {
			ns := netns.New(b, "nftp-beside")
			k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { k.Close() })
			tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
			for i := 0; i < 200; i++ {
				addService(tr, fmt.Sprintf("s%d", i), i)
			}
			bd, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
			if err != nil {
				b.Fatal(err)
			}
			rec := &recorder{}
			p := New(tr, k, []*ruleset.Builder{bd}, rec, logr.Discard(), time.Now)
			p.SetMaxServiceCost(0)
			if mode == "one" {
				p.isolate = math.MaxInt
			}
			ctx := context.Background()
			if _, err := p.Sync(ctx, true); err != nil {
				b.Fatal(err)
			}
			key := model.ServiceKey{Namespace: "default", Name: "big"}
			var cheap time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rec.take()
				addBig(tr, "big", 250, 400)
				tr.UpsertEndpointSlice(slice("s7", fmt.Sprintf("198.18.129.%d", 1+i%200)))
				if _, err := p.Sync(ctx, false); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				lat := rec.take()
				if len(lat) != 2 {
					b.Fatalf("%d programming latencies, want 2", len(lat))
				}
				cheap += lat[0]
				tr.DeleteService(key)
				tr.DeleteEndpointSlice("default", "big-abc")
				if _, err := p.Sync(ctx, false); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(cheap.Seconds()*1000/float64(b.N), "cheap-ms")
		})
	}
}
