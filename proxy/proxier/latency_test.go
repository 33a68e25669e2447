package proxier

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// clock is a fake clock the Tracker and the Proxier share.
type clock struct{ at time.Time }

func (c *clock) now() time.Time          { return c.at }
func (c *clock) advance(d time.Duration) { c.at = c.at.Add(d) }
func (r *recorder) take() []time.Duration { // the observations since the last take, sorted
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.latency
	r.latency = nil
	slices.Sort(out)
	return out
}

// triggered is slice with the trigger time the EndpointSlice controller writes.
func triggered(at time.Time, svc string, addrs ...string) *discoveryv1.EndpointSlice {
	s := slice(svc, addrs...)
	s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: at.Format(time.RFC3339Nano)}
	return s
}

// TestProgrammingLatencyFromTriggerTime: as upstream kube-proxy, the network-programming
// latency of an EndpointSlice change runs from the slice's last-change-trigger-time to the
// commit, one observation per change, taken after the sync that programmed it (a failed sync
// observes nothing; its retry does); a change without a trigger time (a slice without the
// annotation, as in manifest mode) runs from when the Tracker recorded it, and a trigger time
// older than the Tracker (written before nftproxy started) is not measured from.
func TestProgrammingLatencyFromTriggerTime(t *testing.T) {
	c := &clock{at: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	start := c.now()
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard(), Now: c.now})
	k := &flaky{Interface: nft.NewFake()}
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	p := New(tr, k, []*ruleset.Builder{b}, rec, logr.Discard(), c.now)
	ctx := context.Background()
	sync := func(wantErr bool) {
		t.Helper()
		if _, err := p.Sync(ctx, false); (err != nil) != wantErr {
			t.Fatalf("sync: error %v, want error: %v", err, wantErr)
		}
	}
	check := func(what string, want ...time.Duration) {
		t.Helper()
		if got := rec.take(); !slices.Equal(got, want) {
			t.Errorf("%s: observed %v, want %v", what, got, want)
		}
	}

	// Objects written before nftproxy started: their trigger time is not measured from.
	tr.UpsertService(service("web", "198.19.0.10"))
	tr.UpsertEndpointSlice(triggered(start.Add(-time.Hour), "web", "198.18.128.10"))
	tr.UpsertService(service("db", "198.19.0.11"))
	tr.UpsertEndpointSlice(slice("db", "198.18.128.20"))
	c.advance(20 * time.Millisecond)
	sync(false)
	check("first sync", 20*time.Millisecond, 20*time.Millisecond)

	// Trigger time T; nftproxy sees the slice at T+300ms and commits at T+350ms: 350ms.
	trigger := c.now()
	c.advance(300 * time.Millisecond)
	tr.UpsertEndpointSlice(triggered(trigger, "web", "198.18.128.10", "198.18.128.11"))
	// db's slice has no trigger time: measured from receipt, T+300ms, so 50ms.
	tr.UpsertEndpointSlice(slice("db", "198.18.128.20", "198.18.128.21"))
	c.advance(50 * time.Millisecond)
	sync(false)
	check("trigger time and receipt", 50*time.Millisecond, 350*time.Millisecond)

	// Two changes of web before a sync, the first sync fails: both are observed by the retry,
	// each from its own trigger time.
	t1 := c.now()
	c.advance(100 * time.Millisecond)
	tr.UpsertEndpointSlice(triggered(t1, "web", "198.18.128.12"))
	t2 := c.now()
	c.advance(100 * time.Millisecond)
	tr.UpsertEndpointSlice(triggered(t2, "web", "198.18.128.13"))
	k.set(true)
	sync(true)
	check("failed sync")
	k.set(false)
	c.advance(time.Second)
	sync(false)
	check("retry", 1100*time.Millisecond, 1200*time.Millisecond)
}
