package report

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/bench/peers"
	"github.com/nftproxy/nftproxy/bench/probe"
	"github.com/nftproxy/nftproxy/bench/syncs"
)

// TestGoals reads the verdicts off a made-up campaign: each threshold on both sides of its
// line, the restart's ops, a goal the campaign did not measure, and the rows that only show a
// figure.
func TestGoals(t *testing.T) {
	ms := time.Millisecond
	sample := func(total, kernel time.Duration, ops int) syncs.Sample {
		return syncs.Sample{Total: total, Kernel: kernel, Ops: ops}
	}
	r := &Results{Syncs: syncs.Results{
		{Services: 10000, Endpoints: 10}: {
			syncs.Full:        {sample(900*ms, 400*ms, 1), sample(1900*ms, 1100*ms, 1), sample(2100*ms, 1200*ms, 1)}, // median 1.9 s, kernel 1.1 s
			syncs.Restart:     {sample(1200*ms, 0, 0), sample(1300*ms, 0, 3)},
			syncs.OneEndpoint: {sample(600*time.Microsecond, 0, 19)},
			syncs.NewService:  {sample(12*ms, 0, 23)},
		},
		{Services: 50000, Endpoints: 10}: {
			syncs.Full:        {sample(6*time.Second, 0, 1)},
			syncs.OneEndpoint: {sample(6*ms, 0, 19)}, // over the 5 ms partial-sync goal
		},
	}, Peers: []peers.Result{
		{Peer: peers.NFTProxy, Services: 10000, FullSync: time.Second, PeakRSS: 151 << 20,
			NewServiceE2E: []time.Duration{40 * ms, 45 * ms, 70 * ms}},
		{Peer: peers.NFTProxy, Services: 30000, FullSync: 4 * time.Second,
			FirstPacket: probe.Latencies{Samples: []time.Duration{20 * time.Microsecond}}, Direct: probe.Latencies{Samples: []time.Duration{16 * time.Microsecond}}},
		{Peer: peers.KubeProxyNFTables, Services: 30000, FullSync: time.Hour, PeakRSS: 1},
	}}
	want := map[string]string{
		"10k × 10: full sync from empty (model in memory; from manifest files: bench/README)": "met",
		"10k × 10: its kernel commit":                                   "**not met**",
		"10k × 10: restart against the programmed kernel":               "met",
		"10k × 10: restart sends nothing":                               "**not met**",
		"10k × 10: 1 endpoint changed":                                  "met",
		"10k × 10: 1 new Service":                                       "**not met**",
		"50k × 10: full sync from empty":                                "met",
		"partial sync flat: 1 endpoint changed at 50k":                  "**not met**",
		"5k × 50 (250k endpoints): full sync from empty":                "not measured in this campaign",
		"Kubernetes mode, 10k: new Service API→packet p50":              "met",
		"first packet through a ClusterIP at 30000 Services, p50 (p99)": "measured",
	}
	got := map[string]goal{}
	for _, g := range goals(r) {
		got[g.what] = g
	}
	for what, verdict := range want {
		g, ok := got[what]
		if !ok {
			t.Errorf("no goal %q in %v", what, got)
			continue
		}
		if g.verdict() != verdict {
			t.Errorf("%s: %s (measured %q), want %s", what, g.verdict(), g.got, verdict)
		}
	}
	if g := got["Kubernetes mode, 10k: peak RSS (MB of 2^20 bytes, as the peers table)"]; g.got != "151 MB" || g.met {
		t.Errorf("peak RSS: %q met=%v, want 151 MB not met", g.got, g.met)
	}
	if g := got["partial sync flat: 1 endpoint changed at 50k"]; g.got != "6.0 ms (10.0× the 10k figure, for 5× the Services)" {
		t.Errorf("flat: %q", g.got)
	}
	if g := got["first packet through a ClusterIP at 30000 Services, p50 (p99)"]; g.got != "20 µs (20 µs); direct 16 µs (16 µs)" {
		t.Errorf("first packet: %q", g.got)
	}
	var b bytes.Buffer
	goalsSection(&b, r)
	if n := strings.Count(b.String(), "\n| "); n != len(got)+1 {
		t.Errorf("goals table has %d rows, want %d goals and the header:\n%s", n, len(got), b.String())
	}
}

// TestAPIShare: the split of API→packet pairs each trial's end-to-end time with its own API
// time, and a campaign that recorded no API times leaves the table out.
func TestAPIShare(t *testing.T) {
	ms := time.Millisecond
	var b bytes.Buffer
	apiShare(&b, &Results{Peers: []peers.Result{{Peer: peers.NFTProxy, Services: 100, EndpointE2E: []time.Duration{9 * ms}}}})
	if b.Len() != 0 {
		t.Errorf("no API times recorded, yet:\n%s", b.String())
	}
	apiShare(&b, &Results{Peers: []peers.Result{{Peer: peers.NFTProxy, Services: 100,
		EndpointE2E: []time.Duration{9 * ms, 20 * ms, 8 * ms}, EndpointAPI: []time.Duration{4 * ms, 5 * ms, 6 * ms},
		NewServiceE2E: []time.Duration{60 * ms}, NewServiceAPI: []time.Duration{45 * ms}}}})
	// after: 5, 15, 2 ms → median 5 ms; the new Service's 15 ms.
	if row := "| 100 | nftproxy | 5.0 ms | 5.0 ms | 45 ms | 15 ms |"; !strings.Contains(b.String(), row) {
		t.Errorf("want row %q in:\n%s", row, b.String())
	}
}

// TestPeersTwoReleases: two releases of a kube-proxy mode are two peers side by side, in the
// tables (each row and ratio names its release) and as two lines of the plots.
func TestPeersTwoReleases(t *testing.T) {
	s := time.Second
	r := &Results{Peers: []peers.Result{
		{Peer: peers.NFTProxy, Services: 100, FullSync: s / 100},
		{Peer: peers.KubeProxyNFTables, Version: "v1.37.2", Services: 100, FullSync: s / 10},
		{Peer: peers.KubeProxyNFTables, Version: "v1.34.4", Services: 100, FullSync: s},
	}}
	var b bytes.Buffer
	peersSection(&b, r)
	for _, row := range []string{"| 100 | kube-proxy nftables v1.37.2 | 100 ms", "| 100 | kube-proxy nftables v1.34.4 | 1.00 s",
		"| 100 | kube-proxy nftables v1.37.2 | 10", "| 100 | kube-proxy nftables v1.34.4 | 100"} {
		if !strings.Contains(b.String(), row) {
			t.Errorf("want a row starting %q in:\n%s", row, b.String())
		}
	}
	svg := plots(r)["peers-sync.svg"]
	for _, name := range []string{"kube-proxy nftables v1.37.2", "kube-proxy nftables v1.34.4"} {
		if !strings.Contains(svg, name) {
			t.Errorf("peers-sync.svg has no line %q", name)
		}
	}
}
