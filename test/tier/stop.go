package tier

import (
	"testing"
	"time"
)

// StopHang is how long AwaitStop waits for a component to return before it calls it hung: far
// beyond any delay a busy machine causes, so that only a component that ignores its stop (a
// leaked goroutine, a lost signal) fails a test.
const StopHang = 5 * time.Minute

// AwaitStop waits for what's Run (or process) to return on done after it was told to stop, and
// fails t if it returned an error. Slow teardown is not a failure: past slow it logs and keeps
// waiting; only StopHang later does it fail t, naming what hung.
func AwaitStop(t testing.TB, what string, done <-chan error, slow time.Duration) {
	t.Helper()
	check := func(err error) {
		if err != nil {
			t.Errorf("%s: returned %v after it was told to stop", what, err)
		}
	}
	select {
	case err := <-done:
		check(err)
		return
	case <-time.After(slow):
	}
	t.Logf("%s still running %s after it was told to stop (a busy machine?); waiting up to %s more", what, slow, StopHang)
	select {
	case err := <-done:
		check(err)
	case <-time.After(StopHang):
		t.Errorf("%s did not stop within %s of being told to: it hangs", what, slow+StopHang)
	}
}
