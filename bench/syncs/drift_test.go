package syncs

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// TestDriftQuick: with the default hour between full resyncs, `nft flush ruleset` is seen
// through nftables events and every element comes back. Nothing about time is asserted.
func TestDriftQuick(t *testing.T) {
	netns.Skip(t)
	r, err := MeasureDrift(context.Background(), 200, 10, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if r.Repairs == 0 || r.ElementsAfter != r.ElementsWant || r.ElementsWant == 0 {
		t.Errorf("after nft flush ruleset: %d repairs counted, %d elements back of %d", r.Repairs, r.ElementsAfter, r.ElementsWant)
	}
}

// TestDriftMeasure records the drift figures at 10k Services (bench/README.md). Run with
// NFTPROXY_MEASURE=1.
func TestDriftMeasure(t *testing.T) {
	if os.Getenv("NFTPROXY_MEASURE") == "" {
		t.Skip("set NFTPROXY_MEASURE=1 to measure")
	}
	netns.Skip(t)
	r, err := MeasureDrift(context.Background(), 10000, 10, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
}
