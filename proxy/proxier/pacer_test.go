package proxier

import (
	"testing"
	"time"
)

// fakeLoop drives a pacer on a fake clock the way Run does: each sync starts as soon as the
// pacer allows (or when its change arrives, if later) and lasts the given duration.
type fakeLoop struct {
	p   pacer
	now time.Time
}

// sync runs one sync of duration d for a change arriving at the current fake time and returns
// how long the change waited before its sync started.
func (l *fakeLoop) sync(d time.Duration) (waited time.Duration) {
	if w := l.p.wait(l.now); w > 0 {
		waited = w
		l.now = l.now.Add(w)
	}
	start := l.now
	l.now = l.now.Add(d)
	l.p.ran(start, l.now)
	return waited
}

func newFakeLoop(fixed bool, period time.Duration) *fakeLoop {
	return &fakeLoop{p: pacer{fixed: fixed, period: period}, now: time.Unix(1_800_000_000, 0)}
}

// TestPacerNewServiceAfterIdle: a new Service is two objects (Service, then its EndpointSlice);
// after an idle spell both go out without waiting for the ceiling: the first at once, the second
// after the floor.
func TestPacerNewServiceAfterIdle(t *testing.T) {
	l := newFakeLoop(false, time.Second)
	l.sync(2 * time.Second) // the first full sync
	l.now = l.now.Add(time.Minute)
	if w := l.sync(19 * time.Millisecond); w != 0 {
		t.Errorf("first change after an idle minute waited %v, want 0", w)
	}
	if w := l.sync(19 * time.Millisecond); w != paceFloor {
		t.Errorf("the EndpointSlice right after waited %v, want the floor %v", w, paceFloor)
	}
}

// TestPacerSpacesBurstsByCost: under a sustained stream of changes, after the burst allowance
// the gap between syncs follows their cost (paceCostFactor × duration), so syncs take at most
// 1/(1+paceCostFactor) of the time; cheap syncs are never held near the ceiling.
func TestPacerSpacesBurstsByCost(t *testing.T) {
	for _, d := range []time.Duration{time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond} {
		t.Run(d.String(), func(t *testing.T) {
			l := newFakeLoop(false, time.Second)
			begin := l.now
			var waits []time.Duration
			for i := 0; i < 200; i++ {
				waits = append(waits, l.sync(d))
			}
			if waits[0] != 0 || (paceCostFactor*d <= paceBurst && waits[1] != paceFloor) {
				t.Errorf("first waits %v, want 0 then the floor %v (burst allowance)", waits[:2], paceFloor)
			}
			want := max(paceCostFactor*d, paceFloor)
			if got := waits[len(waits)-1]; got < want-time.Microsecond || got > want+time.Microsecond {
				t.Errorf("steady gap %v, want %v (paceCostFactor × %v, at least the floor)", got, want, d)
			}
			busy := time.Duration(len(waits)) * d
			if share, limit := float64(busy)/float64(l.now.Sub(begin)), 1.0/(1+paceCostFactor)+0.01; share > limit {
				t.Errorf("syncs took %.0f%% of the time, want at most %.0f%%", share*100, limit*100)
			}
		})
	}
}

// TestPacerCeiling: an expensive sync (a full sync of seconds) is followed by the ceiling, not
// by paceCostFactor times its cost, and its debt does not hold the next cheap syncs at the
// ceiling too.
func TestPacerCeiling(t *testing.T) {
	l := newFakeLoop(false, time.Second)
	l.sync(5 * time.Millisecond)
	l.sync(3 * time.Second)
	if w := l.sync(5 * time.Millisecond); w != time.Second {
		t.Errorf("after a 3 s sync the next waited %v, want the ceiling 1s", w)
	}
	if w := l.sync(5 * time.Millisecond); w >= 100*time.Millisecond {
		t.Errorf("the next cheap sync waited %v: the full sync's debt still holds it", w)
	}
	small := newFakeLoop(false, 20*time.Millisecond)
	small.sync(time.Second)
	if w := small.sync(time.Millisecond); w != 20*time.Millisecond {
		t.Errorf("ceiling 20ms: waited %v after a 1 s sync, want 20ms", w)
	}
}

// TestPacerFixed: a fixed period is kube-proxy's --min-sync-period: the same wait after every
// sync whatever it cost, and 0 means none.
func TestPacerFixed(t *testing.T) {
	l := newFakeLoop(true, time.Second)
	if w := l.sync(time.Millisecond); w != 0 {
		t.Errorf("first sync waited %v, want 0", w)
	}
	for i := 0; i < 3; i++ {
		if w := l.sync(time.Millisecond); w != time.Second {
			t.Errorf("sync %d waited %v, want the fixed 1s", i+2, w)
		}
	}
	l.now = l.now.Add(400 * time.Millisecond)
	if w := l.sync(time.Millisecond); w != 600*time.Millisecond {
		t.Errorf("a change 400ms after a sync waited %v, want the rest of the period, 600ms", w)
	}
	zero := newFakeLoop(true, 0)
	zero.sync(time.Second)
	if w := zero.sync(time.Second); w != 0 {
		t.Errorf("fixed 0 waited %v, want 0", w)
	}
}
