package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Drift detection and health-report metric names.
const (
	// DriftSuspected counts the verifications a foreign change started, by cause:
	// "foreign_change" (another process committed to our tables) or "events_lost" (the event
	// socket overflowed, so anything may have changed). The repairs they made are counted in
	// DriftRepairs.
	DriftSuspected = "nftproxy_drift_suspected_total"
	// SourceUp is 1 while the source answers (API server reachable, manifest directory
	// readable), 0 while it fails. Reported, never a reason for /healthz to fail.
	SourceUp = "nftproxy_source_up"
	// NodeEligible is 0 while the Node is being deleted or tainted ToBeDeletedByClusterAutoscaler
	// (/healthz answers 503 then, as kube-proxy's), else 1.
	NodeEligible = "nftproxy_node_eligible"
)

// Drift counts suspected drift.
type Drift struct {
	suspected *prometheus.CounterVec
}

// DriftCause is a label value of DriftSuspected.
const (
	DriftForeignChange = "foreign_change"
	DriftEventsLost    = "events_lost"
)

// NewDrift creates the drift counter and registers it on reg.
func NewDrift(reg prometheus.Registerer) (*Drift, error) {
	m := &Drift{suspected: prometheus.NewCounterVec(prometheus.CounterOpts{Name: DriftSuspected,
		Help: "Full verifications started because nftables events showed another process changing nftproxy's tables (cause foreign_change) or were lost (events_lost)."}, []string{"cause"})}
	m.suspected.WithLabelValues(DriftForeignChange)
	m.suspected.WithLabelValues(DriftEventsLost)
	if err := reg.Register(m.suspected); err != nil {
		return nil, err
	}
	return m, nil
}

// Suspected counts one verification started for cause.
func (m *Drift) Suspected(cause string) { m.suspected.WithLabelValues(cause).Inc() }

// WatchHealth exports what /healthz reports besides sync staleness: whether the source answers
// and whether the node is eligible for traffic. Either func may be nil (not exported).
func WatchHealth(reg prometheus.Registerer, sourceUp, nodeEligible func() bool) error {
	gauge := func(name, help string, f func() bool) error {
		if f == nil {
			return nil
		}
		return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if f() {
				return 1
			}
			return 0
		}))
	}
	if err := gauge(SourceUp, "1 while the source of Services answers (API server reachable, manifest directory readable), 0 while it fails; the rules stay and /healthz is not affected.", sourceUp); err != nil {
		return err
	}
	return gauge(NodeEligible, "0 while this Node is being deleted or tainted ToBeDeletedByClusterAutoscaler (/healthz then answers 503, as kube-proxy's), else 1.", nodeEligible)
}
