package manifest

import "time"

// clock is the time a Watcher reads and waits on: the real one in production, a fake one that
// tests advance instead of sleeping.
type clock interface {
	Now() time.Time
	// NewTimer returns a running timer that fires once, d from now.
	NewTimer(d time.Duration) timer
}

// timer is the part of time.Timer a Watcher uses. As time.Timer's (Go 1.23 on), Reset and Stop
// leave no stale value to be received from C.
type timer interface {
	C() <-chan time.Time
	Reset(d time.Duration) bool
	Stop() bool
}

// realClock is the time package's clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) timer { return realTimer{time.NewTimer(d)} }

// realTimer is a time.Timer as a timer.
type realTimer struct{ *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.Timer.C }
