package report

import (
	"fmt"
	"io"
	"time"

	"github.com/nftproxy/nftproxy/bench/peers"
	"github.com/nftproxy/nftproxy/bench/probe"
	"github.com/nftproxy/nftproxy/bench/syncs"
)

// goal is one of the scale goals the layout was built for, with the figure this campaign
// measured for it. got is empty when the campaign did not measure it.
type goal struct {
	what, target, got string
	met               bool
	// shown: the goal asks for the figure to be measured and shown, not for a threshold.
	shown bool
}

func (g goal) verdict() string {
	switch {
	case g.got == "":
		return "not measured in this campaign"
	case g.shown:
		return "measured"
	case g.met:
		return "met"
	}
	return "**not met**"
}

// goals reads the scale goals off the campaign: the control plane at 10k and 50k Services × 10
// endpoints and 5k × 50, and nftproxy's own row among the peers at 10k (Kubernetes mode) and at
// the largest size it ran. What bounds a figure that misses its goal is in bench/README.md.
func goals(r *Results) []goal {
	cp := func(services, endpoints int, ph syncs.Phase, field func(syncs.Sample) time.Duration) time.Duration {
		return syncs.Median(r.Syncs[syncs.Shape{Services: services, Endpoints: endpoints}][ph], field)
	}
	total := func(s syncs.Sample) time.Duration { return s.Total }
	kernel := func(s syncs.Sample) time.Duration { return s.Kernel }
	atMost := func(what string, got, limit time.Duration) goal {
		g := goal{what: what, target: "≤ " + d(limit)}
		if got > 0 {
			g.got, g.met = d(got), got <= limit
		}
		return g
	}
	var gs []goal
	gs = append(gs,
		atMost("10k × 10: full sync from empty (model in memory; from manifest files: bench/README)", cp(10000, 10, syncs.Full, total), 2*time.Second),
		atMost("10k × 10: its kernel commit", cp(10000, 10, syncs.Full, kernel), time.Second),
		atMost("10k × 10: restart against the programmed kernel", cp(10000, 10, syncs.Restart, total), 1500*time.Millisecond))
	if res := r.Syncs[syncs.Shape{Services: 10000, Endpoints: 10}][syncs.Restart]; len(res) > 0 {
		most := 0
		for _, s := range res {
			most = max(most, s.Ops)
		}
		gs = append(gs, goal{what: "10k × 10: restart sends nothing", target: "0 ops", got: fmt.Sprintf("%d ops (most of %d runs)", most, len(res)), met: most == 0})
	}
	gs = append(gs,
		atMost("10k × 10: 1 endpoint changed", cp(10000, 10, syncs.OneEndpoint, total), 5*time.Millisecond),
		atMost("10k × 10: 1 new Service", cp(10000, 10, syncs.NewService, total), 10*time.Millisecond),
		atMost("50k × 10: full sync from empty", cp(50000, 10, syncs.Full, total), 10*time.Second))
	// Flat: a partial sync at 50k stays inside the partial-sync goal set for 10k.
	flat := goal{what: "partial sync flat: 1 endpoint changed at 50k", target: "≤ 5.0 ms, as at 10k"}
	if a, b := cp(50000, 10, syncs.OneEndpoint, total), cp(10000, 10, syncs.OneEndpoint, total); a > 0 {
		flat.got, flat.met = d(a), a <= 5*time.Millisecond
		if b > 0 {
			flat.got += fmt.Sprintf(" (%s the 10k figure, for 5× the Services)", ratio(a, b))
		}
	}
	gs = append(gs, flat)
	shape := goal{what: "5k × 50 (250k endpoints): full sync from empty", target: "measured", shown: true}
	if got := cp(5000, 50, syncs.Full, total); got > 0 {
		shape.got = d(got)
	}
	gs = append(gs, shape)

	var at10k, largest *peers.Result
	for i := range r.Peers {
		p := &r.Peers[i]
		if p.Peer != peers.NFTProxy || p.FullSync == 0 {
			continue
		}
		if p.Services == 10000 {
			at10k = p
		}
		if largest == nil || p.Services > largest.Services {
			largest = p
		}
	}
	rss := goal{what: "Kubernetes mode, 10k: peak RSS (MB of 2^20 bytes, as the peers table)", target: "≤ 150 MB"}
	newSvc := goal{what: "Kubernetes mode, 10k: new Service API→packet p50", target: "≤ 50 ms"}
	if at10k != nil {
		mb := float64(at10k.PeakRSS) / (1 << 20)
		rss.got, rss.met = fmt.Sprintf("%.0f MB", mb), mb <= 150
		newSvc = atMost(newSvc.what, median(at10k.NewServiceE2E), 50*time.Millisecond)
	}
	gs = append(gs, rss, newSvc)
	first := goal{what: "first packet through a ClusterIP at the largest size, p50 (p99)", target: "measured, beside a direct connection to the pod", shown: true}
	if largest != nil && len(largest.FirstPacket.Samples) > 0 {
		l, dl := largest.FirstPacket.Samples, largest.Direct.Samples
		first.what = fmt.Sprintf("first packet through a ClusterIP at %d Services, p50 (p99)", largest.Services)
		first.got = fmt.Sprintf("%s (%s); direct %s (%s)", d(probe.Percentile(l, 50)), d(probe.Percentile(l, 99)), d(probe.Percentile(dl, 50)), d(probe.Percentile(dl, 99)))
	}
	return append(gs, first)
}

func goalsSection(w io.Writer, r *Results) {
	fmt.Fprintf(w, "\n## Scale goals, as this campaign measured them\n\n"+
		"The goals the layout was built for (medians of this run; the control plane from section 1, "+
		"Kubernetes mode from nftproxy's rows in section 2). What bounds a figure that misses its goal, "+
		"and manifest mode's memory and `run --once` wall time (measured by bench/cmd/memory, not by this "+
		"campaign), are in bench/README.md.\n\n| goal | target | measured | |\n|---|---|---|---|\n")
	for _, g := range goals(r) {
		got := g.got
		if got == "" {
			got = "–"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", g.what, g.target, got, g.verdict())
	}
}
