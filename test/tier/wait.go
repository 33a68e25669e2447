package tier

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
)

// Poll calls cond every interval until it returns true (nil), returns an error (that error), ctx
// ends (its error) or limit passes. Every wait of a tier is bounded by it, so a broken daemon
// fails a test instead of hanging the tier.
func Poll(ctx context.Context, limit, every time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not true after %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(every):
		}
	}
}

// Until is Poll for a test: it fails t with what and the last value cond reported when cond
// never holds.
func Until(t testing.TB, ctx context.Context, limit, every time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := Poll(ctx, limit, every, func() (bool, error) {
		var ok bool
		ok, last = cond()
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: %v; last seen: %s", what, err, last)
	}
}

// WaitRuleset polls the lab node's `nft list ruleset` until cond holds and returns how long
// that took. It fails t, with the ruleset (and the daemon's exit when d is given and exits),
// after limit.
func WaitRuleset(t testing.TB, ctx context.Context, l *lab.Lab, d *lab.Process, limit, every time.Duration, what string, cond func(ruleset string) bool) time.Duration {
	t.Helper()
	start := time.Now()
	var rs string
	err := Poll(ctx, limit, every, func() (bool, error) {
		var err error
		if rs, err = l.Ruleset(); err != nil {
			return false, err
		}
		if cond(rs) {
			return true, nil
		}
		if d != nil {
			select {
			case <-d.Done():
				return false, fmt.Errorf("the daemon exited (%v)", d.Err())
			default:
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; ruleset:\n%s", what, err, rs)
	}
	return time.Since(start)
}

// Buffer is a bytes.Buffer safe for a process's writers and the test's readers: where a daemon's
// log is kept rather than streamed.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
