// Package health serves /healthz and /livez with kube-proxy's semantics: /healthz fails while a
// change waits too long to be programmed (or syncs keep failing, or none has succeeded yet);
// /livez answers whether the sync loop itself is alive (no change waiting, no failures, past the
// timeout), ignoring source readiness and the first sync.
package health

import (
	"encoding/json"
	"net/http"
	"time"
)

// State is what the handlers need to know, read at request time.
type State struct {
	// LastSuccess is the last successful sync (zero before the first).
	LastSuccess func() time.Time
	// FailingSince is when the current run of failed syncs began (zero if the last succeeded).
	FailingSince func() time.Time
	// PendingSince is when the oldest change not yet taken by the sync loop arrived (zero: none).
	PendingSince func() time.Time
	// Ready is false until the sources have delivered their initial state.
	Ready func() bool
	// SourceFailingSince, when set, is when the source (the API server) stopped answering, zero
	// while it answers. /healthz fails once that lasts longer than Timeout; /livez does not
	// (restarting the proxy would not bring the API server back).
	SourceFailingSince func() time.Time
	// Timeout is how long a change may wait, or failures last, before /healthz fails.
	Timeout time.Duration
	Now     func() time.Time
	// Served, when set, is told each answer (path "/healthz" or "/livez", HTTP status), for the
	// kube-proxy compatible request counters.
	Served func(path string, code int)
}

type report struct {
	LastUpdated string `json:"lastUpdated"`
	CurrentTime string `json:"currentTime"`
	Healthy     bool   `json:"nodeHealthy"`
	Reason      string `json:"reason,omitempty"`
}

// healthy decides /healthz; livez ignores source readiness (a node cut off from the API server
// is not dead).
func (s *State) healthy(livez bool) (bool, string) {
	now := s.Now()
	last := s.LastSuccess()
	switch {
	case !livez && s.Ready != nil && !s.Ready():
		return false, "sources have not delivered their initial state"
	case !livez && last.IsZero():
		// Not ready before the first sync; but alive: an API server that is down when the node
		// boots must not make the kubelet restart the proxy in a loop.
		return false, "no sync has succeeded yet"
	case !s.FailingSince().IsZero() && now.Sub(s.FailingSince()) > s.Timeout:
		return false, "syncs have been failing since " + s.FailingSince().UTC().Format(time.RFC3339)
	case !livez && s.SourceFailingSince != nil && !s.SourceFailingSince().IsZero() && now.Sub(s.SourceFailingSince()) > s.Timeout:
		return false, "the API server has not answered since " + s.SourceFailingSince().UTC().Format(time.RFC3339) + "; the rules stay as they are"
	case !s.PendingSince().IsZero() && now.Sub(s.PendingSince()) > s.Timeout:
		return false, "a change has waited since " + s.PendingSince().UTC().Format(time.RFC3339)
	}
	return true, ""
}

func (s *State) handler(livez bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ok, reason := s.healthy(livez)
		rep := report{CurrentTime: s.Now().UTC().Format(time.RFC3339Nano), Healthy: ok, Reason: reason}
		if t := s.LastSuccess(); !t.IsZero() {
			rep.LastUpdated = t.UTC().Format(time.RFC3339Nano)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		code := http.StatusOK
		if !ok {
			code = http.StatusServiceUnavailable
		}
		w.WriteHeader(code)
		if s.Served != nil {
			s.Served(r.URL.Path, code)
		}
		_ = json.NewEncoder(w).Encode(rep)
	}
}

// Healthy is /healthz's verdict; the health-check node ports answer 503 while it is false, so
// load balancers move away from a node whose rules may be stale.
func (s *State) Healthy() bool {
	ok, _ := s.healthy(false)
	return ok
}

// Register adds /healthz and /livez to mux.
func (s *State) Register(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", s.handler(false))
	mux.HandleFunc("/livez", s.handler(true))
}
