package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/proxy/conntrack"
)

// Conntrack cleanup metric names: nftproxy's own, and kube-proxy's conntrack reconciler names
// (same meaning, label ip_family) so that its dashboards work unchanged.
const (
	ConntrackDeleted          = "nftproxy_conntrack_deleted_entries_total"
	ConntrackCleanupDuration  = "nftproxy_conntrack_cleanup_duration_seconds"
	ConntrackCleanupFailures  = "nftproxy_conntrack_cleanup_failures_total"
	KubeProxyConntrackDeleted = "kubeproxy_conntrack_reconciler_deleted_entries_total"
	KubeProxyConntrackSync    = "kubeproxy_conntrack_reconciler_sync_duration_seconds"
)

// conntrackBuckets span a dump of a few entries (100 µs) to a million-entry table (tens of s).
var conntrackBuckets = prometheus.ExponentialBuckets(0.0001, 2, 19)

// Conntrack implements conntrack.Observer.
type Conntrack struct {
	deleted, failures, kpDeleted *prometheus.CounterVec
	duration, kpDuration         *prometheus.HistogramVec
}

var _ conntrack.Observer = (*Conntrack)(nil)

// NewConntrack creates the conntrack cleanup collectors and registers them on reg. Both family
// series exist from the start (reading 0). It fails, registering nothing, if a name is taken.
func NewConntrack(reg prometheus.Registerer) (*Conntrack, error) {
	m := &Conntrack{
		deleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ConntrackDeleted,
			Help: "Stale UDP conntrack entries deleted after syncs (flows to a Service frontend whose reply source is no longer a serving endpoint), by family."},
			[]string{"family"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: ConntrackCleanupFailures,
			Help: "Conntrack cleanups that failed (table dump or some deletions), by family."}, []string{"family"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: ConntrackCleanupDuration, Buckets: conntrackBuckets,
			Help: "Time of one conntrack cleanup (table dump, match, deletions), by family."}, []string{"family"}),
		kpDeleted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: KubeProxyConntrackDeleted,
			Help: "kube-proxy compatible: conntrack entries deleted by the reconciler."}, []string{"ip_family"}),
		kpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: KubeProxyConntrackSync, Buckets: kubeProxySyncBuckets,
			Help: "kube-proxy compatible: conntrack reconciler run time."}, []string{"ip_family"}),
	}
	for _, f := range []string{"IPv4", "IPv6"} {
		m.deleted.WithLabelValues(f)
		m.failures.WithLabelValues(f)
		m.kpDeleted.WithLabelValues(f)
	}
	cs := []prometheus.Collector{m.deleted, m.failures, m.duration, m.kpDeleted, m.kpDuration}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("register conntrack metrics: %w (create them once per registry)", err)
		}
	}
	return m, nil
}

// ConntrackCleaned implements conntrack.Observer.
func (m *Conntrack) ConntrackCleaned(family string, deleted int, d time.Duration, err error) {
	m.deleted.WithLabelValues(family).Add(float64(deleted))
	m.kpDeleted.WithLabelValues(family).Add(float64(deleted))
	m.duration.WithLabelValues(family).Observe(d.Seconds())
	m.kpDuration.WithLabelValues(family).Observe(d.Seconds())
	if err != nil {
		m.failures.WithLabelValues(family).Inc()
	}
}
