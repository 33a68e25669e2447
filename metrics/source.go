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
	// SourceBadFiles is the number of manifest files that cannot be used now (unreadable, not
	// decodable, too large); each keeps the objects of its last good load, if it has one.
	SourceBadFiles = "nftproxy_source_bad_files"
	// SourceLastGoodLoads counts manifest files replaced at start by their last good copy
	// (--state-dir) because they could not be used.
	SourceLastGoodLoads = "nftproxy_source_last_good_loads_total"
	// NodeObjectMissing is 1 while the source holds no Node object for this node (manifest
	// mode): the last one read is kept, or none is, and then node ports are not served.
	NodeObjectMissing = "nftproxy_node_object_missing"
)

// Source reports the state of the daemon's sources, by label source ("manifests", "apiserver").
// A source's state is either pushed (Failing) or read at scrape time (Follow).
type Source struct {
	upDesc      *prometheus.Desc
	failures    *prometheus.CounterVec
	badFiles    *prometheus.GaugeVec
	lastGood    *prometheus.CounterVec
	nodeMissing prometheus.Gauge

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
			Help: "Times the source became unreadable or, for manifests, a file of it unusable (one per streak), by source."}, []string{"source"}),
		badFiles: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: SourceBadFiles,
			Help: "Manifest files that cannot be used now (unreadable, not decodable, too large); each keeps the objects of its last good load if it has one. source_up is 0 while this is not."}, []string{"source"}),
		lastGood: prometheus.NewCounterVec(prometheus.CounterOpts{Name: SourceLastGoodLoads,
			Help: "Manifest files that could not be used at start and were replaced by their last good copy kept in --state-dir."}, []string{"source"}),
		nodeMissing: prometheus.NewGauge(prometheus.GaugeOpts{Name: NodeObjectMissing,
			Help: "1 while the manifests hold no Node object for this node: the last one read is kept (node ports keep being served), or, if none was ever read, node ports are not served."}),
		pushed: map[string]bool{}, follow: map[string]func() bool{},
	}
	for _, s := range sources {
		m.order = append(m.order, s)
		m.pushed[s] = true
		m.failures.WithLabelValues(s)
		if s == manifestsSource {
			m.badFiles.WithLabelValues(s)
			m.lastGood.WithLabelValues(s)
		}
	}
	if err := reg.Register(m); err != nil {
		return nil, fmt.Errorf("register source metrics: %w (create them once per registry)", err)
	}
	return m, nil
}

// manifestsSource is the source label of manifest mode, the one with files and a Node object.
const manifestsSource = "manifests"

// BadFiles sets how many files of source cannot be used now.
func (m *Source) BadFiles(source string, n int) { m.badFiles.WithLabelValues(source).Set(float64(n)) }

// LastGoodLoaded counts a file of source replaced by its last good copy.
func (m *Source) LastGoodLoaded(source string) { m.lastGood.WithLabelValues(source).Inc() }

// NodeMissing sets whether this node's Node object is missing from the manifests.
func (m *Source) NodeMissing(missing bool) {
	v := 0.0
	if missing {
		v = 1
	}
	m.nodeMissing.Set(v)
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
	m.badFiles.Describe(ch)
	m.lastGood.Describe(ch)
	m.nodeMissing.Describe(ch)
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
	m.badFiles.Collect(ch)
	m.lastGood.Collect(ch)
	if m.hasManifests() {
		m.nodeMissing.Collect(ch)
	}
}

// hasManifests: manifest mode, the only one with a Node object to miss.
func (m *Source) hasManifests() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.order {
		if s == manifestsSource {
			return true
		}
	}
	return false
}
