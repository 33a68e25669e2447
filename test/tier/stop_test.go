package tier

import (
	"errors"
	"testing"
	"time"
)

// fakeTB records what AwaitStop reports.
type fakeTB struct {
	testing.TB
	logs, errs int
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Logf(string, ...any)   { f.logs++ }
func (f *fakeTB) Errorf(string, ...any) { f.errs++ }

// TestAwaitStopLogsSlowTeardown: a component that returns after the slow bound is logged, not
// a failure; one that returns an error fails.
func TestAwaitStopLogsSlowTeardown(t *testing.T) {
	done := make(chan error, 1)
	go func() { time.Sleep(50 * time.Millisecond); done <- nil }()
	f := &fakeTB{TB: t}
	AwaitStop(f, "slow thing", done, time.Millisecond)
	if f.logs != 1 || f.errs != 0 {
		t.Errorf("slow stop: %d logs, %d failures; want 1 log, no failure", f.logs, f.errs)
	}
	done <- errors.New("boom")
	f = &fakeTB{TB: t}
	AwaitStop(f, "failing thing", done, time.Minute)
	if f.errs != 1 {
		t.Errorf("stop with an error: %d failures, want 1", f.errs)
	}
}
