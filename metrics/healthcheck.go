package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/proxy/health"
)

// Health-check node-port server metric names (externalTrafficPolicy=Local Services).
const (
	HealthCheckListenFailures = "nftproxy_healthcheck_listen_failures_total"
	HealthCheckNodePorts      = "nftproxy_healthcheck_node_ports"
)

// HealthCheck implements health.CheckObserver.
type HealthCheck struct {
	failures prometheus.Counter
	ports    *prometheus.GaugeVec
}

var _ health.CheckObserver = (*HealthCheck)(nil)

// NewHealthCheck creates the health-check server collectors and registers them on reg. It
// fails, registering nothing, if a name is taken.
func NewHealthCheck(reg prometheus.Registerer) (*HealthCheck, error) {
	m := &HealthCheck{
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: HealthCheckListenFailures,
			Help: "Attempts to open the health-check listener (--health-check-port) that failed (port held by another process); retried every second."}),
		ports: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: HealthCheckNodePorts,
			Help: "Health-check node ports of externalTrafficPolicy=Local Services after the last update, by state: serving (the listener they are redirected to is open) or failed (it is not)."}, []string{"state"}),
	}
	m.ports.WithLabelValues("serving")
	m.ports.WithLabelValues("failed")
	cs := []prometheus.Collector{m.failures, m.ports}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("register health-check metrics: %w (create them once per registry)", err)
		}
	}
	return m, nil
}

// ListenFailed implements health.CheckObserver.
func (m *HealthCheck) ListenFailed(uint16, error) { m.failures.Inc() }

// Listeners implements health.CheckObserver.
func (m *HealthCheck) Listeners(serving, failed int) {
	m.ports.WithLabelValues("serving").Set(float64(serving))
	m.ports.WithLabelValues("failed").Set(float64(failed))
}
