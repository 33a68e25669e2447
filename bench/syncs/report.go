package syncs

import (
	"fmt"
	"io"
	"sort"
	"time"
)

func medianDur(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

func spreadDur(xs []time.Duration) (lo, hi time.Duration) {
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

// Median returns the median of one field over samples.
func Median(samples []Sample, field func(Sample) time.Duration) time.Duration {
	xs := make([]time.Duration, len(samples))
	for i, s := range samples {
		xs[i] = field(s)
	}
	return medianDur(xs)
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}

func cell(samples []Sample, field func(Sample) time.Duration) string {
	xs := make([]time.Duration, len(samples))
	for i, s := range samples {
		xs[i] = field(s)
	}
	lo, hi := spreadDur(xs)
	if len(xs) < 2 {
		return fmtDur(medianDur(xs))
	}
	return fmt.Sprintf("%s [%s–%s]", fmtDur(medianDur(xs)), fmtDur(lo), fmtDur(hi))
}

func fmtBytes(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f kB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// Markdown writes one table per shape: medians with [min–max] over runs.
func Markdown(w io.Writer, res Results) {
	for _, shape := range res.Shapes() {
		fmt.Fprintf(w, "\n**%d Services × %d endpoints** (median [min–max] of %d runs)\n\n", shape.Services, shape.Endpoints, len(res[shape][Full]))
		fmt.Fprintf(w, "| phase | total | our Go (build+diff) | read-back | encode | kernel apply | CPU user | CPU sys | ops | bytes sent |\n")
		fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, ph := range Phases {
			ss := res[shape][ph]
			if len(ss) == 0 {
				continue
			}
			ops := make([]time.Duration, len(ss))
			bytes := make([]time.Duration, len(ss))
			for i, s := range ss {
				ops[i], bytes[i] = time.Duration(s.Ops), time.Duration(s.Bytes)
			}
			if ph == NftText {
				fmt.Fprintf(w, "| %s | %s | %s (build+render) | – | – | %s (nft process) | %s (ours) + %s (nft) | %s (ours) + %s (nft) | – | %s text |\n", ph,
					cell(ss, func(s Sample) time.Duration { return s.Total }),
					cell(ss, func(s Sample) time.Duration { return s.Go }),
					cell(ss, func(s Sample) time.Duration { return s.Kernel }),
					cell(ss, func(s Sample) time.Duration { return s.User }),
					cell(ss, func(s Sample) time.Duration { return s.ChildUser }),
					cell(ss, func(s Sample) time.Duration { return s.Sys }),
					cell(ss, func(s Sample) time.Duration { return s.ChildSys }),
					fmtBytes(int(medianDur(bytes))))
				continue
			}
			if isChain(ph) {
				fmt.Fprintf(w, "| %s | %s | – | – | %s | %s | %s | %s | %d | %s |\n", ph,
					cell(ss, func(s Sample) time.Duration { return s.Total }),
					cell(ss, func(s Sample) time.Duration { return s.Encode }),
					cell(ss, func(s Sample) time.Duration { return s.Kernel }),
					cell(ss, func(s Sample) time.Duration { return s.User }),
					cell(ss, func(s Sample) time.Duration { return s.Sys }),
					int(medianDur(ops)), fmtBytes(int(medianDur(bytes))))
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %d | %s |\n", ph,
				cell(ss, func(s Sample) time.Duration { return s.Total }),
				cell(ss, func(s Sample) time.Duration { return s.Go }),
				cell(ss, func(s Sample) time.Duration { return s.ReadBack }),
				cell(ss, func(s Sample) time.Duration { return s.Encode }),
				cell(ss, func(s Sample) time.Duration { return s.Kernel }),
				cell(ss, func(s Sample) time.Duration { return s.User }),
				cell(ss, func(s Sample) time.Duration { return s.Sys }),
				int(medianDur(ops)), fmtBytes(int(medianDur(bytes))))
		}
		for _, s := range res[shape][ChainSkipped] {
			fmt.Fprintf(w, "| %s | %s | | | | | | | | |\n", ChainSkipped, s.Skipped)
		}
	}
}

// Shapes are the shapes res holds, by endpoints per Service then Services.
func (res Results) Shapes() []Shape {
	out := make([]Shape, 0, len(res))
	for s := range res {
		out = append(out, s)
	}
	SortShapes(out)
	return out
}

func isChain(ph Phase) bool {
	for _, c := range ChainPhases {
		if c == ph {
			return true
		}
	}
	return false
}
