package metrics

import (
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Source metric names: whether the daemon's source (manifest directory, API server) can be read,
// so an alert can fire while the node keeps serving its last good state. Reported, never a reason
// for /healthz to fail.
const (
	SourceUp       = "nftproxy_source_up"
	SourceFailures = "nftproxy_source_failures_total"
)

// Source reports the state of the daemon's sources, by label source ("manifests", "apiserver").
// A source's state is either pushed (Failing) or read at scrape time (Follow).
type Source struct {
	upDesc   *prometheus.Desc
	failures *prometheus.CounterVec

	mu     sync.Mutex
	order  []string
	pushed map[string]bool
	follow map[string]func() bool
}

// NewSource creates the source collectors, registers them on reg and starts each named source
// up (1) with no failures. It fails, registering nothing, if a name is taken.
func NewSource(reg prometheus.Registerer, sources ...string) (*Source, error) {
	m := &Source{
		upDesc: prometheus.NewDesc(SourceUp,
			"1 while the source can be read (API server answering, manifest directory readable), 0 while it cannot; the last good rules are kept meanwhile and /healthz is not affected.",
			[]string{"source"}, nil),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: SourceFailures,
			Help: "Times the source became unreadable (one per streak of failed reads), by source."}, []string{"source"}),
		pushed: map[string]bool{}, follow: map[string]func() bool{},
	}
	for _, s := range sources {
		m.order = append(m.order, s)
		m.pushed[s] = true
		m.failures.WithLabelValues(s)
	}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("register source metrics: %w (create them once per registry)", err)
	}
	return m, nil
}

// Follow reports source as up while up() is true, read at each scrape: for a source whose
// state is known elsewhere (the API server's reachability, kept by the health state).
func (m *Source) Follow(source string, up func() bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.pushed[source]; !ok {
		if _, ok := m.follow[source]; !ok {
			m.order = append(m.order, source)
		}
	}
	delete(m.pushed, source)
	m.follow[source] = up
	m.failures.WithLabelValues(source)
}

// Failing records that source became unreadable (err != nil) or readable again (nil).
func (m *Source) Failing(source string, err error) {
	m.mu.Lock()
	if _, ok := m.pushed[source]; !ok {
		m.order = append(m.order, source)
	}
	m.pushed[source] = err == nil
	m.mu.Unlock()
	if err != nil {
		m.failures.WithLabelValues(source).Inc()
	}
}

// Describe implements prometheus.Collector.
func (m *Source) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.upDesc
	m.failures.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Source) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	for _, s := range m.order {
		up, ok := m.pushed[s]
		if f := m.follow[s]; f != nil {
			up, ok = f(), true
		}
		if !ok {
			continue
		}
		v := 0.0
		if up {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(m.upDesc, prometheus.GaugeValue, v, s)
	}
	m.mu.Unlock()
	m.failures.Collect(ch)
}
