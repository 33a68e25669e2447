package syncs

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/test/netns"
)

// TestQuick runs one small campaign against the kernel and checks what must hold whatever the
// timings: the restart sends nothing, every partial sync sends something and far less than the
// full sync.
func TestQuick(t *testing.T) {
	netns.Skip(t)
	cfg := Config{Sizes: []int{200}, Endpoints: 10, Runs: 1, Seed: 1}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := res[Shape{Services: 200, Endpoints: 10}]
	full := r[Full][0]
	if full.Ops == 0 {
		t.Fatal("full sync sent nothing")
	}
	if got := r[Restart][0].Ops; got != 0 {
		t.Errorf("restart against the programmed kernel sent %d ops, want 0", got)
	}
	for _, ph := range []Phase{OneEndpoint, EndpointsX, NewService} {
		if got := r[ph][0].Ops; got == 0 || got >= full.Ops {
			t.Errorf("%s: %d ops, want more than 0 and fewer than the full sync's %d", ph, got, full.Ops)
		}
	}
	if sk := r[ChainSkipped]; len(sk) > 0 {
		t.Fatalf("per-endpoint chains at 200 Services: %s", sk[0].Skipped)
	}
	chainFull := r[ChainFull][0]
	if chainFull.Ops <= full.Ops {
		t.Errorf("per-endpoint chains: full sync sent %d ops, want more than nftproxy's %d (a chain and two rules per endpoint)", chainFull.Ops, full.Ops)
	}
	for _, ph := range []Phase{ChainOneEndpoint, ChainEndpointsX, ChainNewService} {
		if got := r[ph][0].Ops; got == 0 || got >= chainFull.Ops {
			t.Errorf("%s: %d ops, want more than 0 and fewer than the layout's full sync's %d", ph, got, chainFull.Ops)
		}
	}
}

// BenchmarkSync is the `make bench` entry point: one run of every phase per iteration, each
// phase's total, Go and kernel times reported as metrics (benchstat gives medians over -count).
func BenchmarkSync(b *testing.B) {
	for _, size := range []int{1000, 10000} {
		b.Run(sizeName(size), func(b *testing.B) {
			netns.Skip(b)
			for i := 0; i < b.N; i++ {
				res, err := Run(context.Background(), Config{Sizes: []int{size}, Endpoints: 10, Runs: 1, Seed: 1 + int64(i)})
				if err != nil {
					b.Fatal(err)
				}
				for ph, unit := range metricNames {
					s := res[Shape{Services: size, Endpoints: 10}][ph][0]
					b.ReportMetric(float64(s.Total.Microseconds())/1e3, unit+"-total-ms")
					b.ReportMetric(float64(s.Kernel.Microseconds())/1e3, unit+"-kernel-ms")
					b.ReportMetric(float64(s.Go.Microseconds())/1e3, unit+"-go-ms")
				}
			}
		})
	}
}

var metricNames = map[Phase]string{
	Full: "full", Restart: "restart", OneEndpoint: "ep1", EndpointsX: "ep100", NewService: "newsvc", NftText: "nft-f",
}

func sizeName(n int) string {
	if n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// TestChainSkip: a per-endpoint-chain comparison that cannot run at a size is skipped there with
// its reason, and at every larger size without being built; a smaller shape still runs it.
func TestChainSkip(t *testing.T) {
	big := fmt.Errorf("per-endpoint chains: full sync: apply transaction (4875043 ops): %w: 1147567492 bytes", nft.ErrBatchTooLarge)
	why, large := chainSkip(big)
	if !large || !strings.Contains(why, "one netlink batch") || !strings.Contains(why, "1147567492") {
		t.Errorf("batch too large: reason %q, large %v; want the size named and large", why, large)
	}
	why, large = chainSkip(errors.New("op 3 add rule: EINVAL"))
	if large || !strings.Contains(why, "EINVAL") {
		t.Errorf("another failure: reason %q, large %v; want it named, not large", why, large)
	}
	at := []Shape{{Services: 100000, Endpoints: 10}}
	for _, c := range []struct {
		s    Shape
		skip bool
	}{
		{Shape{Services: 100000, Endpoints: 10}, true},
		{Shape{Services: 200000, Endpoints: 10}, true},
		{Shape{Services: 50000, Endpoints: 50}, true},
		{Shape{Services: 50000, Endpoints: 10}, false},
		{Shape{Services: 5000, Endpoints: 50}, false},
	} {
		if got := skipBefore(c.s, at); (got != "") != c.skip || c.skip && !strings.Contains(got, "100000 Services × 10") {
			t.Errorf("%s after 100000x10 did not fit: %q, want skipped %v", c.s, got, c.skip)
		}
	}
	if got := skipBefore(Shape{Services: 100000, Endpoints: 10}, nil); got != "" {
		t.Errorf("nothing skipped before: %q", got)
	}
	var b strings.Builder
	Markdown(&b, Results{Shape{Services: 100000, Endpoints: 10}: {Full: {{Total: 1}}, ChainSkipped: {{Skipped: why}}}})
	if !strings.Contains(b.String(), "| "+string(ChainSkipped)+" | "+why) {
		t.Errorf("report without the reason %q:\n%s", why, b.String())
	}
}

// TestServiceOps: adding a Service costs a few ops whatever the size of the cluster, more for
// more endpoints and frontends, and every shape costs something.
func TestServiceOps(t *testing.T) {
	rows, full, err := ServiceOps(context.Background(), 300, 10)
	if err != nil {
		t.Fatal(err)
	}
	if full <= 0 {
		t.Errorf("full sync: %.1f ops per Service", full)
	}
	got := map[string]float64{}
	for _, r := range rows {
		got[r.Shape.Name] = r.Add
		if r.Add <= 0 || r.First <= 0 {
			t.Errorf("%s: %.1f ops per Service, %d the first: want some", r.Shape.Name, r.Add, r.First)
		}
	}
	one, ten, np, lb := got[ServiceShapes[0].Name], got[ServiceShapes[1].Name], got[ServiceShapes[2].Name], got[ServiceShapes[3].Name]
	if !(one < ten && ten < np && np < lb) {
		t.Errorf("ops per Service: 1 endpoint %.1f, 10 endpoints %.1f, NodePort %.1f, LoadBalancer %.1f; want each more than the one before", one, ten, np, lb)
	}
}
