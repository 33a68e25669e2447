package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

func TestNewRejects(t *testing.T) {
	cs := fake.NewClientset()
	ok := Config{Client: cs, BlockRange: testBlockRange, Identity: "a", LeaseNamespace: "kube-system"}
	cases := []struct {
		name   string
		mutate func(*Config)
		errHas string
	}{
		{name: "no client", mutate: func(c *Config) { c.Client = nil }, errHas: "no API client"},
		{name: "no identity", mutate: func(c *Config) { c.Identity = "" }, errHas: "unique one"},
		{name: "no lease namespace", mutate: func(c *Config) { c.LeaseNamespace = "" }, errHas: "Lease namespace"},
		{name: "renew deadline too long", mutate: func(c *Config) { c.LeaseDuration, c.RenewDeadline = time.Second, 2*time.Second },
			errHas: "must be shorter"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.mutate(&cfg)
			if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tc.errHas) {
				t.Errorf("got %v, want an error containing %q", err, tc.errHas)
			}
		})
	}
	if _, err := New(ok); err != nil {
		t.Errorf("valid config: %v", err)
	}
}

// TestRunHandsOver runs two controllers on one fake API: one leads and assigns; when its
// context ends the other takes over (after the Lease expires) and assigns what comes next.
func TestRunHandsOver(t *testing.T) {
	cs := fake.NewClientset()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := func(id string) (*Controller, context.CancelFunc, chan error) {
		c, err := New(Config{Client: cs, BlockRange: testBlockRange, Identity: id, LeaseNamespace: "kube-system",
			LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
			Events: &recorder{}, Logger: logr.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		cctx, ccancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- c.Run(cctx) }()
		return c, ccancel, done
	}
	a, stopA, doneA := run("a")
	b, stopB, doneB := run("b")
	defer func() { stopA(); stopB(); <-doneA; <-doneB }()

	waitRecorded := func(name, want string) {
		t.Helper()
		var got string
		err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			s, err := cs.CoreV1().Services("voip").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = s.Annotations[annotation.NodePortRangesKey]
			return got == want, nil
		})
		if err != nil {
			t.Fatalf("Service %s: annotation %q, want %q (%v)", name, got, want, err)
		}
	}
	if _, err := cs.CoreV1().Services("voip").Create(ctx, svc("one", 0, "rtp=16384-16393"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRecorded("one", "rtp=16384-16393")
	leader, other, stop, done := a, b, stopA, doneA
	if !a.IsLeader() {
		leader, other, stop, done = b, a, stopB, doneB
	}
	if !leader.IsLeader() || other.IsLeader() {
		t.Fatalf("leaders: a %v, b %v; want exactly one", a.IsLeader(), b.IsLeader())
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("stopped leader's Run: %v", err)
	}
	done <- nil // the deferred clean-up reads it again
	if leader.IsLeader() {
		t.Error("a stopped controller still says it leads")
	}
	if _, err := cs.CoreV1().Services("voip").Create(ctx, svc("two", 1, "rtp=17000-17009"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRecorded("two", "rtp=17000-17009")
	if !other.IsLeader() {
		t.Error("the remaining controller does not lead after assigning")
	}
	snap, ok := other.Snapshot()
	if !ok || len(snap.Blocks) != 2 {
		t.Errorf("new leader's allocation: got %+v (leading %v), want both blocks", snap, ok)
	}
}

// TestLeaderObserved: a replica knows no leader (not ready) until it has read the Lease, then
// names the holder; a leader that renews is alive.
func TestLeaderObserved(t *testing.T) {
	cs := fake.NewClientset()
	c, err := New(Config{Client: cs, BlockRange: testBlockRange, Identity: "a", LeaseNamespace: "kube-system",
		LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond, RetryPeriod: 100 * time.Millisecond,
		Events: &recorder{}, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := c.Leader(); ok {
		t.Fatalf("before Run: leader %q known, want none", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		id, ok := c.Leader()
		return ok && id == "a" && c.IsLeader(), nil
	})
	if err != nil {
		id, ok := c.Leader()
		t.Fatalf("Leader: got %q, %v (leading %v), want a, true", id, ok, c.IsLeader())
	}
	if err := c.Alive(); err != nil {
		t.Errorf("a renewing leader is not alive: %v", err)
	}
}
