package syncs

import (
	"context"
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
