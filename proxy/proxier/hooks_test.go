package proxier

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// hookFunc adapts a function to Hook.
type hookFunc func(ctx context.Context, c *Commit) error

// AfterCommit calls f.
func (f hookFunc) AfterCommit(ctx context.Context, c *Commit) error { return f(ctx, c) }

// hookCall is what one AfterCommit saw.
type hookCall struct {
	name    string
	changed map[model.ServiceKey]*model.Service
}

// TestHooksSeeChangesOfFailedSyncs: hooks run in order after every successful sync and never
// after a failed one; a Service changed by a failed sync comes with the next successful sync's
// changes, as its model then (the conntrack hook pairs it with what was last committed); a
// removed Service comes as nil; a hook's error does not fail the sync.
func TestHooksSeeChangesOfFailedSyncs(t *testing.T) {
	k := &flaky{Interface: nft.NewFake()}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	tr.UpsertService(service("web", "198.19.0.10"))
	tr.UpsertEndpointSlice(slice("web", "198.18.128.10"))
	tr.UpsertService(service("db", "198.19.0.11"))
	p := newProxier(t, k, tr, nil)
	var calls []hookCall
	record := func(name string, err error) Hook {
		return hookFunc(func(_ context.Context, c *Commit) error {
			calls = append(calls, hookCall{name, c.Changed})
			return err
		})
	}
	p.AddHook("first", record("first", errors.New("the first hook fails")))
	p.AddHook("second", record("second", nil))
	web := model.ServiceKey{Namespace: "default", Name: "web"}
	db := model.ServiceKey{Namespace: "default", Name: "db"}
	ctx := context.Background()

	if _, err := p.Sync(ctx, true); err != nil {
		t.Fatalf("first sync: %v (a hook's error must not fail it)", err)
	}
	if len(calls) != 2 || calls[0].name != "first" || calls[1].name != "second" {
		t.Fatalf("hooks after the first sync: %+v, want first then second", calls)
	}
	if got := calls[1].changed; len(got) != 2 || got[web] == nil || got[db] == nil {
		t.Errorf("first sync handed %v, want both Services", got)
	}

	calls = nil
	k.set(true)
	tr.UpsertEndpointSlice(slice("web", "198.18.128.10", "198.18.128.11"))
	if _, err := p.Sync(ctx, false); err == nil {
		t.Fatal("sync on a failing kernel succeeded")
	}
	if len(calls) != 0 {
		t.Fatalf("hooks ran after a failed sync: %+v", calls)
	}

	k.set(false)
	tr.DeleteService(db)
	if _, err := p.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 {
		t.Fatalf("hooks after the recovering sync: %+v, want both", calls)
	}
	got := calls[0].changed
	if s, ok := got[web]; !ok || s != tr.Service(web) {
		t.Errorf("the failed sync's change of web was not handed on with its current model: %v", got)
	}
	if s, ok := got[db]; !ok || s != nil {
		t.Errorf("the removed Service db was not handed on as nil: %v", got)
	}

	calls = nil
	if _, err := p.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 2 || len(calls[0].changed) != 0 {
		t.Errorf("a sync without changes handed %+v, want both hooks told nothing changed", calls)
	}
}

// retrying is a hook whose work fails the first fails calls and is retried meanwhile.
type retrying struct {
	mu           sync.Mutex
	calls, fails int
}

func (h *retrying) AfterCommit(context.Context, *Commit) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls++
	if h.calls <= h.fails {
		return errors.New("conntrack socket: dump interrupted")
	}
	return nil
}

func (h *retrying) RetryPending() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls <= h.fails
}

func (h *retrying) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls
}

// TestRunnerRetriesHooks: a hook with work left to retry (Retrier) is run again by syncs the
// runner makes on its own, with no change and no Notify, until it has nothing pending; then the
// runner waits for changes again.
func TestRunnerRetriesHooks(t *testing.T) {
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	tr.UpsertService(service("web", "198.19.0.10"))
	p := newProxier(t, &locked{k: nft.NewFake()}, tr, nil)
	h := &retrying{fails: 2}
	p.AddHook("retrying", h)
	r := NewRunner(p, RunConfig{MinSyncPeriod: 10 * time.Millisecond, FullSyncPeriod: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// Bounded, generous wait: each retry follows StaleChainDelay.
	deadline := time.Now().Add(30 * time.Second)
	for h.count() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("hook ran %d times, want 3 (the first sync and two retries)", h.count())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if p.PendingCleanup() {
		t.Error("cleanup still pending after the hook's retry succeeded")
	}
}
