package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Source metric names: whether the daemon's source (manifest directory, API server) can be read,
// so an alert can fire while the node keeps serving its last good state.
const (
	SourceUp       = "nftproxy_source_up"
	SourceFailures = "nftproxy_source_failures_total"
)

// Source reports the state of the daemon's sources, by label source ("manifests", ...).
type Source struct {
	up       *prometheus.GaugeVec
	failures *prometheus.CounterVec
}

// NewSource creates the source collectors, registers them on reg and starts each named source
// up (1) with no failures. It fails, registering nothing, if a name is taken.
func NewSource(reg prometheus.Registerer, sources ...string) (*Source, error) {
	m := &Source{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: SourceUp,
			Help: "1 while the source can be read, 0 while it cannot (the last good state is kept meanwhile), by source."},
			[]string{"source"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: SourceFailures,
			Help: "Times the source became unreadable (one per streak of failed reads), by source."}, []string{"source"}),
	}
	for _, s := range sources {
		m.up.WithLabelValues(s).Set(1)
		m.failures.WithLabelValues(s)
	}
	if err := reg.Register(m.up); err != nil {
		return nil, fmt.Errorf("register source metrics: %w (create them once per registry)", err)
	}
	if err := reg.Register(m.failures); err != nil {
		reg.Unregister(m.up)
		return nil, fmt.Errorf("register source metrics: %w (create them once per registry)", err)
	}
	return m, nil
}

// Failing records that source became unreadable (err != nil) or readable again (nil).
func (m *Source) Failing(source string, err error) {
	if err == nil {
		m.up.WithLabelValues(source).Set(1)
		return
	}
	m.up.WithLabelValues(source).Set(0)
	m.failures.WithLabelValues(source).Inc()
}
