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
		Help: "Full verifications started because nftables events showed another process changing nftproxy's tables (cause foreign_change) or may have been missed (events_lost: the event socket overflowed, or another batch was committed while a large batch of nftproxy's was applied with the event socket out of the group)."}, []string{"cause"})}
	m.suspected.WithLabelValues(DriftForeignChange)
	m.suspected.WithLabelValues(DriftEventsLost)
	if err := reg.Register(m.suspected); err != nil {
		return nil, err
	}
	return m, nil
}

// Suspected counts one verification started for cause.
func (m *Drift) Suspected(cause string) { m.suspected.WithLabelValues(cause).Inc() }

// WatchHealth exports what /healthz reports besides sync staleness: whether the node is
// eligible for traffic. (Whether the source answers is nftproxy_source_up, see Source.)
func WatchHealth(reg prometheus.Registerer, nodeEligible func() bool) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: NodeEligible,
		Help: "0 while this Node is being deleted or tainted ToBeDeletedByClusterAutoscaler (/healthz then answers 503, as kube-proxy's), else 1."},
		func() float64 {
			if nodeEligible() {
				return 1
			}
			return 0
		}))
}
