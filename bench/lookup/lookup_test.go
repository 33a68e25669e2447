package lookup

import (
	"context"
	"strconv"
	"testing"

	"github.com/nftproxy/nftproxy/test/netns"
)

// TestRigDelivers runs a tiny campaign and checks what must hold whatever the timings: every
// cell was measured and the receiver saw every datagram (a lossy flood would under-count work).
func TestRigDelivers(t *testing.T) {
	netns.Skip(t)
	cfg := Config{Sizes: []int{100}, Ranges: 10, AllPorts: 2, Repeat: 2, Packets: 2000, Rounds: 1, Dests: 64}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != len(patterns) {
		t.Fatalf("%d results, want %d", len(res), len(patterns))
	}
	for _, r := range res {
		for _, l := range layouts {
			if len(r.PerRound[l]) != 1 {
				t.Errorf("%v/%v: %d samples, want 1", r.Pattern, l, len(r.PerRound[l]))
			}
		}
		if r.Delivered < 0.999 {
			t.Errorf("%v: only %.1f%% of the datagrams reached the receiver", r.Pattern, 100*r.Delivered)
		}
	}
}

func TestDestsStayInTheirMaps(t *testing.T) {
	m := Maps{Exact: 1000, Ranges: 10, AllPorts: 2}
	for _, d := range Dests(m, Exact, 500) {
		if d.Port < 80 || d.Port >= 130 || d.Addr.As4()[2] > 3 {
			t.Fatalf("exact destination %v:%d is not an exact-port Service", d.Addr, d.Port)
		}
	}
	for _, d := range Dests(m, Range, 100) {
		if d.Port < rangeStart || d.Port >= rangeStart+rangeWidth || d.Addr.As4()[3] >= 10 {
			t.Fatalf("range destination %v:%d outside the ranges", d.Addr, d.Port)
		}
	}
}

// BenchmarkLookup is the `make bench` entry point: one round of every layout and pattern per
// iteration at 30,000 Services; ns per dispatch reported per layout and pattern.
func BenchmarkLookup(b *testing.B) {
	netns.Skip(b)
	for _, size := range []int{30000} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			cfg := Config{Sizes: []int{size}, Ranges: 100, AllPorts: 10, Repeat: 8, Packets: 100000, Rounds: 1, Dests: 1024}
			for i := 0; i < b.N; i++ {
				res, err := Run(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				for _, r := range res {
					name := map[Pattern]string{Exact: "exact", Range: "range", Miss: "miss"}[r.Pattern]
					b.ReportMetric(r.Dispatch(HashPlusInterval, cfg.Repeat)[0], "ns/dispatch-hash-"+name)
					b.ReportMetric(r.Dispatch(SingleInterval, cfg.Repeat)[0], "ns/dispatch-interval-"+name)
				}
			}
		})
	}
}
