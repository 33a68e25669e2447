package report

import (
	"context"
	"flag"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/bench/peers"
	"github.com/nftproxy/nftproxy/bench/probe"
	"github.com/nftproxy/nftproxy/test/netns"
)

var pacingSizes = flag.String("pacing-sizes", "", "TestPacing: Service counts to compare nftproxy's adaptive sync pacing with a fixed --min-sync-period 1s at; empty skips it")

// TestPacing measures, against a real API server, what the adaptive sync pacing does to API→packet
// times: nftproxy with its default pacing and with kube-proxy's fixed 1 s, side by side, at each
// size (new Service: Service then EndpointSlice; endpoint change: one EndpointSlice update). It
// only logs figures:
//
//	go test ./bench/report -run TestPacing -timeout 60m -v -args -pacing-sizes 1000,10000
func TestPacing(t *testing.T) {
	if *pacingSizes == "" {
		t.Skip("no -pacing-sizes")
	}
	netns.Skip(t)
	if skipCluster() {
		t.Skip("cluster tier skipped")
	}
	c, bin := peerCluster(t)
	cfg := peers.Config{Sizes: ints(t, *pacingSizes), Trials: 7, Connects: 200, Limit: 10 * time.Minute, Seed: 1,
		Peers: []peers.Peer{{Kind: peers.NFTProxy, Binary: bin}, {Kind: peers.NFTProxy, Binary: bin, Args: []string{"--min-sync-period", "1s"}}}}
	res, err := peers.Run(context.Background(), peerEnv(t, c), cfg)
	for i, r := range res {
		pacing := "auto"
		if i%2 == 1 {
			pacing = "fixed 1s"
		}
		t.Logf("%d Services, %s: new Service API→packet p50 %v %v (its syncs %v); endpoint change p50 %v %v; peak RSS %d MB; %s",
			r.Services, pacing, probe.Percentile(r.NewServiceE2E, 50), r.NewServiceE2E, r.NewServiceSync,
			probe.Percentile(r.EndpointE2E, 50), r.EndpointE2E, r.PeakRSS>>20, r.Err)
	}
	if err != nil {
		t.Fatal(err)
	}
}
