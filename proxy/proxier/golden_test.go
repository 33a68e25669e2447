package proxier

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/golden"
	"github.com/nftproxy/nftproxy/test/nfttest"
)

// txLog keeps every transaction the kernel took.
type txLog struct {
	nft.Interface
	txs []*nft.Transaction
}

func (l *txLog) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	st, err := l.Interface.Apply(ctx, tx)
	if err == nil {
		l.txs = append(l.txs, tx)
	}
	return st, err
}

// TestSyncGolden pins, as nft scripts in testdata/sync (`-update` rewrites them), what a partial
// sync sends for each kind of API change, from the Service and EndpointSlice objects through the
// tracker, the builder and the reconciler, as upstream kube-proxy's nftables tests pin the
// transaction of a partial sync. Start: Services web (2 endpoints) and db (1), synced in full.
// Element ops of one run on one set are compared sorted (nft.SortElementRuns): the reconciler
// sends a hash set's elements in map-iteration order; every other op is compared in the order
// sent. A step whose sync leaves chains to delete is followed by that later sync.
func TestSyncGolden(t *testing.T) {
	steps := []struct {
		name   string
		change func(tr *model.Tracker)
	}{
		{"endpoint-replaced", func(tr *model.Tracker) {
			tr.UpsertEndpointSlice(slice("web", "198.18.128.10", "198.18.128.12"))
		}},
		{"service-added", func(tr *model.Tracker) {
			tr.UpsertService(service("cache", "198.19.0.30"))
			tr.UpsertEndpointSlice(slice("cache", "198.18.128.30"))
		}},
		{"service-deleted", func(tr *model.Tracker) {
			tr.DeleteService(model.ServiceKey{Namespace: "default", Name: "db"})
			tr.DeleteEndpointSlice("default", "db-abc")
		}},
		{"endpoints-grow", func(tr *model.Tracker) {
			tr.UpsertEndpointSlice(slice("web", "198.18.128.10", "198.18.128.11", "198.18.128.12"))
		}},
		{"endpoints-gone", func(tr *model.Tracker) {
			tr.UpsertEndpointSlice(slice("web"))
		}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			kernel := &txLog{Interface: nft.NewFake()}
			tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
			b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
			if err != nil {
				t.Fatal(err)
			}
			clk := time.Unix(1_800_000_000, 0)
			p := New(tr, kernel, []*ruleset.Builder{b}, nil, logr.Discard(), func() time.Time { return clk })
			ctx := context.Background()
			sync := func() reconciler.Result {
				t.Helper()
				res, err := p.Sync(ctx, false)
				if err != nil {
					t.Fatal(err)
				}
				return res
			}
			tr.UpsertService(service("web", "198.19.0.10"))
			tr.UpsertEndpointSlice(slice("web", "198.18.128.10", "198.18.128.11"))
			tr.UpsertService(service("db", "198.19.0.20"))
			tr.UpsertEndpointSlice(slice("db", "198.18.128.20"))
			if res := sync(); !res.Full {
				t.Fatal("first sync was not full")
			}
			first := len(kernel.txs)

			st.change(tr)
			if res := sync(); res.Full {
				t.Fatal("sync after one change was full, want partial")
			}
			if p.PendingCleanup() {
				clk = clk.Add(reconciler.StaleChainDelay)
				sync()
			}
			var got strings.Builder
			for i, tx := range kernel.txs[first:] {
				fmt.Fprintf(&got, "# transaction %d\n%s", i+1, nft.RenderTransaction(nfttest.SortElementRuns(tx)))
			}
			golden.Check(t, filepath.Join("testdata", "sync", st.name+".nft"), got.String())
		})
	}
}
