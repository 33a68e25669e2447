package manifest

import (
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock that moves only when a test advances it; its timers fire then.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	// armed receives a value each time a timer is started (NewTimer, Reset), without blocking:
	// a test sees that the Watcher took an event in before it moves the time on.
	armed chan struct{}
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), armed: make(chan struct{}, 1000)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) timer {
	t := &fakeTimer{c: c, ch: make(chan time.Time, 1)}
	c.mu.Lock()
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	t.Reset(d)
	return t
}

// Advance moves the time on by d and fires every timer due by then.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		t.fireIfDue()
	}
}

// drainArmed forgets the timer starts seen so far.
func (c *fakeClock) drainArmed() {
	for {
		select {
		case <-c.armed:
		default:
			return
		}
	}
}

// waitArmed waits (bounded) for a timer start after the last drainArmed.
func (c *fakeClock) waitArmed(t *testing.T, what string) {
	t.Helper()
	select {
	case <-c.armed:
	case <-time.After(10 * time.Second):
		t.Fatalf("the Watcher started no timer within 10s after %s", what)
	}
}

// fakeTimer is a timer of a fakeClock. Its channel holds at most one value, and Reset and Stop
// empty it, as time.Timer's leave no stale value.
type fakeTimer struct {
	c      *fakeClock
	ch     chan time.Time
	at     time.Time
	active bool
}

func (t *fakeTimer) C() <-chan time.Time { return t.ch }

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.stop()
	t.at, t.active = t.c.now.Add(d), true
	t.fireIfDue()
	select {
	case t.c.armed <- struct{}{}:
	default:
	}
	return was
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.stop()
}

// stop deactivates t and drops a value not received; the clock's lock is held.
func (t *fakeTimer) stop() bool {
	was := t.active
	t.active = false
	select {
	case <-t.ch:
	default:
	}
	return was
}

// fireIfDue sends the time on t's channel if t is due; the clock's lock is held.
func (t *fakeTimer) fireIfDue() {
	if t.active && !t.at.After(t.c.now) {
		t.active = false
		t.ch <- t.c.now // never blocks: stop empties the channel before each start
	}
}
