package lookup

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// Config is one measurement campaign.
type Config struct {
	// Sizes are the numbers of exact-port Services, one rig each.
	Sizes    []int
	Ranges   int // port-range Services beside them
	AllPorts int // all-ports Services beside them
	// Repeat is how many times each packet runs the dispatch: enough that the lookups dominate
	// the difference to the baseline, few enough that a flood stays short.
	Repeat  int
	Packets int // per flood
	Rounds  int // alternating rounds; figures are medians over them
	Dests   int // distinct destinations per pattern
	// Log, when set, receives one line per flood.
	Log io.Writer
}

// Result is one (size, pattern) cell: per round, the thread CPU per packet of each layout.
type Result struct {
	Size    int
	Pattern Pattern
	// PerRound[layout][round] is CPU ns per packet.
	PerRound map[Layout][]float64
	// Delivered is the smallest delivered/sent ratio seen (1 means no loss).
	Delivered float64
}

// Dispatch is layout l's cost of one dispatch per round: (l - baseline) / Repeat, in ns.
func (r *Result) Dispatch(l Layout, repeat int) []float64 {
	base, got := r.PerRound[Baseline], r.PerRound[l]
	out := make([]float64, len(got))
	for i := range got {
		out[i] = (got[i] - base[i]) / float64(repeat)
	}
	return out
}

var layouts = []Layout{Baseline, HashPlusInterval, SingleInterval}
var patterns = []Pattern{Exact, Range, Miss}

// Run measures every size, pattern and layout. Within a rig the layouts alternate flood by flood
// (their order rotating each round), so slow drifts of the machine hit all of them alike.
func Run(ctx context.Context, cfg Config) ([]Result, error) {
	var out []Result
	for _, size := range cfg.Sizes {
		res, err := runSize(ctx, cfg, size)
		if err != nil {
			return out, fmt.Errorf("%d services: %w", size, err)
		}
		out = append(out, res...)
	}
	return out, nil
}

func runSize(ctx context.Context, cfg Config, size int) ([]Result, error) {
	rig, err := NewRig("nftp-lookup")
	if err != nil {
		return nil, err
	}
	defer rig.Close()
	m := Maps{Exact: size, Ranges: cfg.Ranges, AllPorts: cfg.AllPorts}
	start := time.Now()
	if err := rig.Apply(ctx, Build(m)); err != nil {
		return nil, fmt.Errorf("build maps: %w", err)
	}
	if cfg.Log != nil {
		fmt.Fprintf(cfg.Log, "# %d exact + %d range + %d all-ports Services loaded in %v\n", size, cfg.Ranges, cfg.AllPorts, time.Since(start).Round(time.Millisecond))
	}
	results := make([]Result, len(patterns))
	for i, p := range patterns {
		results[i] = Result{Size: size, Pattern: p, PerRound: map[Layout][]float64{}, Delivered: 1}
	}
	for round := 0; round < cfg.Rounds; round++ {
		for i, p := range patterns {
			dests := Dests(m, p, cfg.Dests)
			for k := range layouts {
				l := layouts[(k+round)%len(layouts)]
				if err := rig.Apply(ctx, Select(l, cfg.Repeat)); err != nil {
					return nil, fmt.Errorf("select %v: %w", l, err)
				}
				if _, err := rig.Flood(dests, cfg.Packets/10); err != nil { // warm caches
					return nil, err
				}
				f, err := rig.Flood(dests, cfg.Packets)
				if err != nil {
					return nil, err
				}
				r := &results[i]
				r.PerRound[l] = append(r.PerRound[l], f.NsPerPacket())
				if d := float64(f.Delivered) / float64(f.Packets); d < r.Delivered {
					r.Delivered = d
				}
				if cfg.Log != nil {
					fmt.Fprintf(cfg.Log, "size=%d round=%d pattern=%q layout=%q cpu_ns_per_pkt=%.0f wall_ns_per_pkt=%.0f delivered=%d/%d\n",
						size, round, p, l, f.NsPerPacket(), f.WallPerPacket(), f.Delivered, f.Packets)
				}
			}
		}
	}
	return results, nil
}

// Median of xs (xs is not modified).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// Spread is the smallest and largest of xs.
func Spread(xs []float64) (lo, hi float64) {
	for i, x := range xs {
		if i == 0 || x < lo {
			lo = x
		}
		if i == 0 || x > hi {
			hi = x
		}
	}
	return lo, hi
}

// Markdown writes the results as a table: per size and pattern, the baseline cost of a packet
// and each layout's cost of one dispatch (median, [min–max] over rounds), and their ratio.
func Markdown(w io.Writer, cfg Config, results []Result) {
	fmt.Fprintf(w, "| Services | packets hit | baseline ns/packet | hash+interval ns/dispatch | one interval map ns/dispatch | one-map / hash+interval |\n")
	fmt.Fprintf(w, "|---:|---|---:|---:|---:|---:|\n")
	for i := range results {
		r := &results[i]
		hpi, one := r.Dispatch(HashPlusInterval, cfg.Repeat), r.Dispatch(SingleInterval, cfg.Repeat)
		ratio := make([]float64, len(hpi))
		for j := range hpi {
			ratio[j] = one[j] / hpi[j]
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %.1f× |%s\n", r.Size, r.Pattern,
			cell(r.PerRound[Baseline]), cell(hpi), cell(one), Median(ratio), lossNote(r.Delivered))
	}
}

func cell(xs []float64) string {
	lo, hi := Spread(xs)
	return fmt.Sprintf("%.0f [%.0f–%.0f]", Median(xs), lo, hi)
}

func lossNote(d float64) string {
	if d >= 0.999 {
		return ""
	}
	return strings.TrimSpace(fmt.Sprintf(" (only %.1f%% delivered)", 100*d))
}
