package conntrack

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// fakeCleaner records the targets of each Cleanup and fails while fail is set.
type fakeCleaner struct {
	calls [][]Target
	fail  bool
}

func (f *fakeCleaner) Cleanup(_ context.Context, targets []Target) (Result, error) {
	f.calls = append(f.calls, targets)
	if f.fail {
		return Result{}, errors.New("netlink: dump interrupted")
	}
	return Result{}, nil
}

// deletes reports whether the targets of one Cleanup delete a UDP entry sent to dst:dport and
// answered from reply.
func deletes(targets []Target, dst netip.Addr, dport uint16, reply netip.AddrPort) bool {
	return newMatcher(targets, dst.Is6()).stale(dst, dport, reply.Addr(), reply.Port())
}

// TestHookRetriesFailedCleanup: a cleanup that fails when a UDP Service loses its only endpoint
// is tried again after the next sync, with nothing changed in between, and deletes the entries
// DNAT'ed to the gone endpoint (a client that keeps sending never lets them time out); once it
// succeeded, nothing is retried. A retry keeps what the frontend's present owner serves.
func TestHookRetriesFailedCleanup(t *testing.T) {
	f := &fakeCleaner{}
	h := newHook(f)
	ctx := context.Background()
	toPod1, toPod2 := netip.AddrPortFrom(pod1, 5353), netip.AddrPortFrom(pod2, 5353)
	call := func(step string, changed map[model.ServiceKey]*model.Service, wantErr bool) {
		t.Helper()
		if err := h.afterChanges(ctx, changed, false, func() []netip.Addr { return nil }); (err != nil) != wantErr {
			t.Fatalf("%s: error %v, want an error: %v", step, err, wantErr)
		}
	}

	call("pod-1 serves", map[model.ServiceKey]*model.Service{svcKey: svc(dns(ep(pod1, 5353)))}, false)
	f.fail = true
	call("no endpoints, the cleanup fails", map[model.ServiceKey]*model.Service{svcKey: svc(dns())}, true)
	if !h.RetryPending() {
		t.Fatal("a failed cleanup left no retry pending")
	}
	f.fail = false
	n := len(f.calls)
	call("next sync, nothing changed", nil, false)
	if len(f.calls) != n+1 {
		t.Fatalf("the sync after a failed cleanup made %d cleanups, want 1 (the retry)", len(f.calls)-n)
	}
	if last := f.calls[n]; !deletes(last, clusterIP, 53, toPod1) {
		t.Errorf("the retry keeps a flow DNAT'ed to the gone pod-1: targets %+v", last)
	}
	if h.RetryPending() {
		t.Error("a retry pending after the retry succeeded")
	}
	call("a later sync, nothing changed", nil, false)
	if len(f.calls) != n+1 {
		t.Errorf("a sync after the successful retry cleaned again: %+v", f.calls[n+1:])
	}

	// Failed again, then pod-2 serves before the retry: the retry keeps pod-2's flows.
	f.fail = true
	call("pod-1 again, the cleanup fails", map[model.ServiceKey]*model.Service{svcKey: svc(dns(ep(pod1, 5353)))}, true)
	call("pod-1 replaced by pod-2, the cleanup fails", map[model.ServiceKey]*model.Service{svcKey: svc(dns(ep(pod2, 5353)))}, true)
	f.fail = false
	n = len(f.calls)
	for i := 0; i < 3 && len(f.calls) == n; i++ { // the second failure in a row waits one sync more
		call("next syncs, nothing changed", nil, false)
	}
	if len(f.calls) != n+1 || h.RetryPending() {
		t.Fatalf("after two failed cleanups, the syncs made %d cleanups, want 1 (retry pending %v)", len(f.calls)-n, h.RetryPending())
	}
	last := f.calls[n]
	if !deletes(last, clusterIP, 53, toPod1) || deletes(last, clusterIP, 53, toPod2) {
		t.Errorf("retry: deletes pod-1's flow %v (want true), pod-2's %v (want false); targets %+v",
			deletes(last, clusterIP, 53, toPod1), deletes(last, clusterIP, 53, toPod2), last)
	}
}

// TestHookRetryBacksOff: a cleanup that keeps failing is retried after the next sync, then after
// every 2nd, 4th, 8th... sync (to a bound), not on every one.
func TestHookRetryBacksOff(t *testing.T) {
	f := &fakeCleaner{fail: true}
	h := newHook(f)
	ctx := context.Background()
	none := func() []netip.Addr { return nil }
	if err := h.afterChanges(ctx, map[model.ServiceKey]*model.Service{svcKey: svc(dns(ep(pod1, 5353)))}, false, none); err == nil {
		t.Fatal("the failing cleanup reported no error")
	}
	var retried []int
	for i := 0; i < 20; i++ {
		n := len(f.calls)
		_ = h.afterChanges(ctx, nil, false, none)
		if len(f.calls) > n {
			retried = append(retried, i)
		}
	}
	if want := []int{0, 2, 6, 14}; !reflect.DeepEqual(retried, want) {
		t.Errorf("retried after syncs %v, want %v", retried, want)
	}
	if !h.RetryPending() {
		t.Error("no retry pending while the cleanup keeps failing")
	}
}
