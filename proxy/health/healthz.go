// Package health answers the probes of nftproxy's health, in two files: healthz.go serves
// /healthz and /livez (State), checks.go the health-check node ports of
// externalTrafficPolicy=Local Services (CheckServer), whose verdict includes State.Healthy.
//
// /healthz and /livez have kube-proxy's semantics. Both follow the rules' staleness, never the
// API server's reachability: cloud load balancers probe /healthz and the health-check node
// ports follow the same verdict, so an unreachable control plane would otherwise take every
// node out of every load balancer at once while the rules keep working.
//
//   - /healthz fails while a change waits too long to be programmed with the sync loop making no
//     progress meanwhile (no transaction committed or started), syncs keep failing, none has
//     succeeded yet, or the Node is being deleted or tainted ToBeDeletedByClusterAutoscaler
//     (KEP-3836: load balancers drain the node before it goes). A change that waits behind a
//     long sync while the loop commits is not staleness: the data path is being programmed,
//     and failing would take the node out of every load balancer for one Service's cost.
//   - /livez answers whether the sync loop itself is alive (no change waiting, no failures, past
//     the timeout), ignoring source readiness, the first sync and the Node.
//   - Healthy (the health-check node ports) is /healthz without the Node, as kube-proxy's
//     IsHealthy: a draining node's local endpoints leave by themselves.
//
// The source's failure is reported (the JSON body, a metric, the log), never a 503.
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
	// Progress, when set, is when the sync loop last made progress (a transaction committed or
	// handed to the kernel; zero: never). A waiting change fails the probes only when the loop
	// has made no progress for Timeout either.
	Progress func() time.Time
	// Ready is false until the sources have delivered their initial state.
	Ready func() bool
	// SourceFailingSince, when set, is when the source (the API server, the manifest directory)
	// stopped answering, zero while it answers. It is reported in the body
	// (sourceFailingSince) and never fails a probe: the rules stay as they are and keep
	// serving, and a control-plane outage must not become a data-plane outage.
	SourceFailingSince func() time.Time
	// NodeDraining, when set, says why this node should receive no new traffic ("" while it
	// should): its Node is being deleted or is tainted ToBeDeletedByClusterAutoscaler. /healthz
	// fails meanwhile, as kube-proxy's; /livez and Healthy do not.
	NodeDraining func() string
	// Timeout is how long a change may wait, or failures last, before /healthz fails.
	Timeout time.Duration
	// StartWait, when set, is how long a /healthz request waits for the first sync before it
	// answers 503 for want of one (0: at once). A readiness probe sent as the container starts
	// then sees the first sync instead of failing on the way to Ready (each failed probe is a
	// Warning event on the pod); the probe's timeout must be longer.
	StartWait time.Duration
	Now       func() time.Time
	// Served, when set, is told each answer (path "/healthz" or "/livez", HTTP status), for the
	// kube-proxy compatible request counters.
	Served func(path string, code int)
}

type report struct {
	LastUpdated string `json:"lastUpdated"`
	CurrentTime string `json:"currentTime"`
	Healthy     bool   `json:"nodeHealthy"`
	Reason      string `json:"reason,omitempty"`
	// NodeEligible is kube-proxy's field: false while the Node is being deleted or drained.
	NodeEligible bool `json:"nodeEligible"`
	// SourceFailingSince is when the source stopped answering (absent while it answers).
	SourceFailingSince string `json:"sourceFailingSince,omitempty"`
}

// probe names a verdict.
type probe int

const (
	probeHealthz  probe = iota // /healthz
	probeLivez                 // /livez
	probeServices              // the health-check node ports (Healthy)
)

// healthy decides a probe. /livez ignores source readiness and the first sync (a node cut off
// from the API server is not dead); only /healthz follows the Node.
func (s *State) healthy(p probe) (bool, string) {
	now := s.Now()
	last := s.LastSuccess()
	switch {
	case p != probeLivez && s.Ready != nil && !s.Ready():
		return false, "sources have not delivered their initial state"
	case p != probeLivez && last.IsZero():
		// Not ready before the first sync; but alive: an API server that is down when the node
		// boots must not make the kubelet restart the proxy in a loop.
		return false, "no sync has succeeded yet"
	case !s.FailingSince().IsZero() && now.Sub(s.FailingSince()) > s.Timeout:
		return false, "syncs have been failing since " + s.FailingSince().UTC().Format(time.RFC3339)
	case !s.PendingSince().IsZero() && now.Sub(s.PendingSince()) > s.Timeout && s.stalled(now):
		return false, "a change has waited since " + s.PendingSince().UTC().Format(time.RFC3339) + " and the sync loop has made no progress since " + s.progress().UTC().Format(time.RFC3339)
	}
	if p == probeHealthz {
		if why := s.draining(); why != "" {
			return false, why
		}
	}
	return true, ""
}

// stalled reports whether the sync loop has made no progress for Timeout.
func (s *State) stalled(now time.Time) bool {
	return now.Sub(s.progress()) > s.Timeout
}

// progress is Progress, or the last success when Progress is not set.
func (s *State) progress() time.Time {
	if s.Progress == nil {
		return s.LastSuccess()
	}
	return s.Progress()
}

func (s *State) draining() string {
	if s.NodeDraining == nil {
		return ""
	}
	return s.NodeDraining()
}

// starting reports whether nothing has been synced yet (the sources' initial state or the
// first sync is missing).
func (s *State) starting() bool {
	return (s.Ready != nil && !s.Ready()) || s.LastSuccess().IsZero()
}

// startPoll is how often a request waiting for the first sync looks again.
const startPoll = 20 * time.Millisecond

// awaitStart waits, up to StartWait or the request's end, while nothing has been synced yet.
func (s *State) awaitStart(r *http.Request) {
	if s.StartWait <= 0 || !s.starting() {
		return
	}
	limit := time.NewTimer(s.StartWait)
	defer limit.Stop()
	tick := time.NewTicker(startPoll)
	defer tick.Stop()
	for s.starting() {
		select {
		case <-r.Context().Done():
			return
		case <-limit.C:
			return
		case <-tick.C:
		}
	}
}

func (s *State) handler(p probe) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p == probeHealthz {
			s.awaitStart(r)
		}
		ok, reason := s.healthy(p)
		rep := report{CurrentTime: s.Now().UTC().Format(time.RFC3339Nano), Healthy: ok, Reason: reason,
			NodeEligible: s.draining() == ""}
		if t := s.LastSuccess(); !t.IsZero() {
			rep.LastUpdated = t.UTC().Format(time.RFC3339Nano)
		}
		if s.SourceFailingSince != nil {
			if t := s.SourceFailingSince(); !t.IsZero() {
				rep.SourceFailingSince = t.UTC().Format(time.RFC3339Nano)
			}
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

// Healthy is the health-check node ports' verdict: /healthz's without the Node (kube-proxy's
// IsHealthy). The ports answer 503 while it is false, so load balancers move away from a node
// whose rules may be stale; never because the API server is unreachable.
func (s *State) Healthy() bool {
	ok, _ := s.healthy(probeServices)
	return ok
}

// SourceUp reports whether the source answers (for the nftproxy_source_up metric).
func (s *State) SourceUp() bool {
	return s.SourceFailingSince == nil || s.SourceFailingSince().IsZero()
}

// NodeEligible reports whether the Node may receive traffic (for the nftproxy_node_eligible
// metric).
func (s *State) NodeEligible() bool { return s.draining() == "" }

// Register adds /healthz and /livez to mux.
func (s *State) Register(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", s.handler(probeHealthz))
	mux.HandleFunc("/livez", s.handler(probeLivez))
}
