package app

import (
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/health"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// families are the IP families the builders program: the ip_family series of the kube-proxy
// metrics.
func families(builders []*ruleset.Builder) []nft.Family {
	var out []nft.Family
	for _, b := range builders {
		out = append(out, b.Family())
	}
	return out
}

// registerComponentMetrics registers what every Kubernetes component exposes besides its own
// metrics: the Go runtime and process collectors, kubernetes_build_info with nftproxy's version,
// and client-go's rest_client_* metrics (the API clients of the process report to reg).
func registerComponentMetrics(reg prometheus.Registerer) error {
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return err
	}
	if err := reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
		return err
	}
	if err := metrics.RegisterBuildInfo(reg, Version); err != nil {
		return err
	}
	_, err := metrics.NewRESTClient(reg)
	return err
}

// daemonMetrics is every collector `nftproxy run` registers on its registry, built in one
// place: a new metric is added here, and the registry served at /metrics holds exactly these
// (plus the listeners' own, registered by serve, and the func-backed gauges of followModel
// and followHealth, which read state built after the bundle).
type daemonMetrics struct {
	reg         *prometheus.Registry
	proxy       *metrics.Proxy
	allocator   *metrics.AllocatorMetrics
	conntrack   *metrics.Conntrack
	healthCheck *metrics.HealthCheck
	source      *metrics.Source
	drift       *metrics.Drift
	localPorts  *metrics.LocalPorts
}

// newDaemonMetrics registers the component metrics and every component's observer on a fresh
// registry. The source series are started for the manifest source when there is one; the API
// server's is followed from the health state (followHealth).
func newDaemonMetrics(o *Options, builders []*ruleset.Builder) (*daemonMetrics, error) {
	m := &daemonMetrics{reg: prometheus.NewRegistry()}
	var sources []string
	if o.Manifests != "" {
		sources = append(sources, manifestSourceLabel)
	}
	for _, register := range []func() error{
		func() error { return registerComponentMetrics(m.reg) },
		func() (err error) {
			m.proxy, err = metrics.NewProxy(m.reg, model.AllReasons(), families(builders)...)
			return err
		},
		func() (err error) { m.allocator, err = metrics.NewAllocatorMetrics(m.reg); return err },
		func() (err error) { m.conntrack, err = metrics.NewConntrack(m.reg); return err },
		func() (err error) { m.healthCheck, err = metrics.NewHealthCheck(m.reg); return err },
		func() (err error) { m.source, err = metrics.NewSource(m.reg, sources...); return err },
		func() (err error) { m.drift, err = metrics.NewDrift(m.reg); return err },
		func() (err error) { m.localPorts, err = metrics.NewLocalPorts(m.reg); return err },
	} {
		if err := register(); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return m, nil
}

// followModel registers the gauges read from the tracker: the pending changes, and what
// watchModel exports.
func (m *daemonMetrics) followModel(tracker *model.Tracker, builders []*ruleset.Builder) error {
	if err := m.proxy.WatchPending(tracker.Pending); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if err := watchModel(m.proxy, tracker, builders); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

// followHealth registers the gauges read from the health state: whether the node is eligible,
// and, without manifests, whether the API server answers. The manifest source pushes its state
// instead (newSource).
func (m *daemonMetrics) followHealth(hs *health.State, manifests bool) error {
	if !manifests {
		m.source.Follow(apiServerSourceLabel, hs.SourceUp)
	}
	if err := metrics.WatchHealth(m.reg, hs.NodeEligible); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	return nil
}

// pprofPath is where --profiling serves Go's profiles, as kube-proxy does.
const pprofPath = "/debug/pprof/"

// metricsMux is the metrics server's handler: /metrics, and with --profiling Go's profiles
// under /debug/pprof/ (the index, cmdline, profile, symbol, trace and every named profile).
func metricsMux(o *Options, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if o.Profiling {
		mux.HandleFunc(pprofPath, pprof.Index)
		mux.HandleFunc(pprofPath+"cmdline", pprof.Cmdline)
		mux.HandleFunc(pprofPath+"profile", pprof.Profile)
		mux.HandleFunc(pprofPath+"symbol", pprof.Symbol)
		mux.HandleFunc(pprofPath+"trace", pprof.Trace)
	}
	return mux
}

// watchModel exports what kube-proxy's metrics read from its change trackers and its rules:
// the Service and EndpointSlice changes, and the Service ports a Local traffic policy leaves
// without a local endpoint, counted by each family's builder over the current model.
func watchModel(pm *metrics.Proxy, tracker *model.Tracker, builders []*ruleset.Builder) error {
	if err := pm.WatchChanges(tracker.ChangeCounts); err != nil {
		return err
	}
	return pm.WatchNoLocalEndpoints(func() []metrics.NoLocalEndpoints {
		snap := tracker.Snapshot()
		services := make([]*model.Service, 0, len(snap.Services))
		for _, s := range snap.Services {
			services = append(services, s)
		}
		out := make([]metrics.NoLocalEndpoints, 0, len(builders))
		for _, b := range builders {
			in, ex := b.NoLocalEndpoints(snap.Node, services)
			out = append(out, metrics.NoLocalEndpoints{Family: b.Family(), Internal: in, External: ex})
		}
		return out
	})
}

// queuing wraps the sync loop's notify: a notification while changes wait for the sync loop
// queues a sync, which kube-proxy's last-queued timestamp records.
func queuing(pm *metrics.Proxy, tracker *model.Tracker, notify func()) func() {
	return func() {
		if !tracker.PendingSince().IsZero() {
			pm.Queued()
		}
		notify()
	}
}
