package health

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
