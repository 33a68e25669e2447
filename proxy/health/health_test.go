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
	cases := []struct {
		name             string
		last, fail, pend func() time.Time
		ready            bool
		healthz, livez   int
		source           func() time.Time // when the API server stopped answering; nil: files
	}{
		{"healthy", at(-time.Second), zero, zero, true, 200, 200, nil},
		{"never synced: not ready, but alive", zero, zero, zero, true, 503, 200, nil},
		{"never synced, a change waiting too long", zero, zero, at(-2 * time.Minute), true, 503, 503, nil},
		{"sources not ready", at(-time.Second), zero, zero, false, 503, 200, nil},
		{"change waiting too long", at(-2 * time.Minute), zero, at(-2 * time.Minute), true, 503, 503, nil},
		{"change waiting a little", at(-time.Second), zero, at(-time.Second), true, 200, 200, nil},
		{"failing too long", at(-5 * time.Minute), at(-2 * time.Minute), zero, true, 503, 503, nil},
		{"failing briefly", at(-5 * time.Second), at(-time.Second), zero, true, 200, 200, nil},
		{"API server gone past the timeout: not ready, alive", at(-5 * time.Minute), zero, zero, true, 503, 200, at(-2 * time.Minute)},
		{"API server gone briefly", at(-5 * time.Second), zero, zero, true, 200, 200, at(-time.Second)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			served := map[string]int{}
			s := &State{LastSuccess: c.last, FailingSince: c.fail, PendingSince: c.pend,
				Ready: func() bool { return c.ready }, Timeout: time.Minute, Now: at(0),
				Served: func(path string, code int) { served[path] = code }, SourceFailingSince: c.source}
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
				if served[path] != want {
					t.Errorf("%s counted as %d, want %d", path, served[path], want)
				}
			}
		})
	}
}
