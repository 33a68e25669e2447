package health

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestHealth(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) func() time.Time { return func() time.Time { return now.Add(d) } }
	zero := func() time.Time { return time.Time{} }
	const deleted, tainted = "the Node is being deleted", "the Node is tainted ToBeDeletedByClusterAutoscaler"
	cases := []struct {
		name             string
		last, fail, pend func() time.Time
		ready            bool
		healthz, livez   int
		services         bool             // Healthy(): the health-check node ports
		source           func() time.Time // when the source stopped answering; nil: files
		draining         string           // NodeDraining
	}{
		{"healthy", at(-time.Second), zero, zero, true, 200, 200, true, nil, ""},
		{"never synced: not ready, but alive", zero, zero, zero, true, 503, 200, false, nil, ""},
		{"never synced, a change waiting too long", zero, zero, at(-2 * time.Minute), true, 503, 503, false, nil, ""},
		{"sources not ready", at(-time.Second), zero, zero, false, 503, 200, false, nil, ""},
		{"change waiting too long", at(-2 * time.Minute), zero, at(-2 * time.Minute), true, 503, 503, false, nil, ""},
		{"change waiting a little", at(-time.Second), zero, at(-time.Second), true, 200, 200, true, nil, ""},
		{"failing too long", at(-5 * time.Minute), at(-2 * time.Minute), zero, true, 503, 503, false, nil, ""},
		{"failing briefly", at(-5 * time.Second), at(-time.Second), zero, true, 200, 200, true, nil, ""},
		// A control-plane outage is reported, never a 503: the rules keep serving.
		{"API server gone past the timeout: healthy, reported", at(-5 * time.Minute), zero, zero, true, 200, 200, true, at(-2 * time.Minute), ""},
		{"API server gone briefly", at(-5 * time.Second), zero, zero, true, 200, 200, true, at(-time.Second), ""},
		// KEP-3836: /healthz drains a node on its way out; /livez and the node ports do not.
		{"node being deleted", at(-time.Second), zero, zero, true, 503, 200, true, nil, deleted},
		{"node tainted by the cluster autoscaler", at(-time.Second), zero, zero, true, 503, 200, true, nil, tainted},
		{"node tainted, API server gone", at(-5 * time.Minute), zero, zero, true, 503, 200, true, at(-2 * time.Minute), tainted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			served := map[string]int{}
			s := &State{LastSuccess: c.last, FailingSince: c.fail, PendingSince: c.pend,
				Ready: func() bool { return c.ready }, Timeout: time.Minute, Now: at(0),
				Served: func(path string, code int) { served[path] = code }, SourceFailingSince: c.source,
				NodeDraining: func() string { return c.draining }}
			mux := http.NewServeMux()
			s.Register(mux)
			for path, want := range map[string]int{"/healthz": c.healthz, "/livez": c.livez} {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
				if rec.Code != want {
					t.Errorf("%s = %d, want %d (body %s)", path, rec.Code, want, rec.Body)
				}
				var rep report
				if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
					t.Errorf("%s body is not JSON: %v", path, err)
				}
				if rep.Healthy != (want == 200) {
					t.Errorf("%s nodeHealthy=%v with status %d", path, rep.Healthy, want)
				}
				if rep.NodeEligible != (c.draining == "") {
					t.Errorf("%s nodeEligible=%v with the node draining %q", path, rep.NodeEligible, c.draining)
				}
				if failing := c.source != nil && !c.source().IsZero(); (rep.SourceFailingSince != "") != failing {
					t.Errorf("%s sourceFailingSince=%q, want it reported: %v", path, rep.SourceFailingSince, failing)
				}
				if served[path] != want {
					t.Errorf("%s counted as %d, want %d", path, served[path], want)
				}
			}
			if got := s.Healthy(); got != c.services {
				t.Errorf("Healthy() (health-check node ports) = %v, want %v", got, c.services)
			}
			if got := s.SourceUp(); got != (c.source == nil || c.source().IsZero()) {
				t.Errorf("SourceUp() = %v, want %v", got, !got)
			}
		})
	}
}

// TestHealthFollowsProgress: a change that waits longer than the timeout fails the probes only
// when the sync loop has made no progress (no transaction committed or started) for as long:
// a change waiting behind a long sync that keeps committing is not staleness, and failing
// would drain the node from every load balancer for one Service's cost. Failures keep their
// own rule (kube-proxy's: stale when syncs stop succeeding).
func TestHealthFollowsProgress(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) func() time.Time { return func() time.Time { return now.Add(d) } }
	zero := func() time.Time { return time.Time{} }
	cases := []struct {
		name                       string
		last, fail, pend, progress func() time.Time
		want                       int
	}{
		{"change waiting behind a long sync that commits", at(-90 * time.Second), zero, at(-2 * time.Minute), at(-5 * time.Second), 200},
		{"change waiting behind a commit the kernel started recently", at(-90 * time.Second), zero, at(-2 * time.Minute), at(-30 * time.Second), 200},
		{"change waiting, the loop stalled", at(-90 * time.Second), zero, at(-2 * time.Minute), at(-90 * time.Second), 503},
		{"one commit in the kernel for longer than the timeout", at(-3 * time.Minute), zero, at(-2 * time.Minute), at(-61 * time.Second), 503},
		{"never made progress", zero, zero, at(-2 * time.Minute), zero, 503},
		{"progress, but syncs failing too long", at(-5 * time.Minute), at(-2 * time.Minute), zero, at(-time.Second), 503},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &State{LastSuccess: c.last, FailingSince: c.fail, PendingSince: c.pend, Progress: c.progress,
				Ready: func() bool { return true }, Timeout: time.Minute, Now: at(0)}
			mux := http.NewServeMux()
			s.Register(mux)
			for _, path := range []string{"/healthz", "/livez"} {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
				if rec.Code != c.want {
					t.Errorf("%s = %d, want %d (body %s)", path, rec.Code, c.want, rec.Body)
				}
			}
			if got := s.Healthy(); got != (c.want == 200) {
				t.Errorf("Healthy() (health-check node ports) = %v, want %v", got, c.want == 200)
			}
		})
	}
}

// A /healthz request that arrives before the first sync waits for it (up to StartWait) and
// answers 200 once it succeeds, so a readiness probe sent as the container starts does not
// fail on the way to Ready; with no sync within StartWait, and from /livez, it answers at once.
func TestHealthzWaitsForFirstSync(t *testing.T) {
	var synced atomic.Int64 // unix nanoseconds of the first sync, 0 before
	last := func() time.Time {
		if n := synced.Load(); n != 0 {
			return time.Unix(0, n)
		}
		return time.Time{}
	}
	zero := func() time.Time { return time.Time{} }
	s := &State{LastSuccess: last, FailingSince: zero, PendingSince: zero, Ready: func() bool { return true },
		Timeout: time.Minute, Now: time.Now, StartWait: time.Minute}
	mux := http.NewServeMux()
	s.Register(mux)
	get := func(path string) chan int {
		code := make(chan int, 1)
		go func() {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
			code <- rec.Code
		}()
		return code
	}
	if c := <-get("/livez"); c != 200 {
		t.Fatalf("/livez before the first sync = %d, want 200 at once", c)
	}
	waiting := get("/healthz")
	select {
	case c := <-waiting:
		t.Fatalf("/healthz before the first sync answered %d at once, want it to wait for the sync", c)
	case <-time.After(100 * time.Millisecond):
	}
	synced.Store(time.Now().UnixNano())
	if c := <-waiting; c != 200 {
		t.Fatalf("/healthz that waited for the first sync = %d, want 200", c)
	}

	synced.Store(0)
	s.StartWait = 10 * time.Millisecond
	if c := <-get("/healthz"); c != 503 {
		t.Fatalf("/healthz with no sync within StartWait = %d, want 503", c)
	}
}
