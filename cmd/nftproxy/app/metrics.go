package app

import (
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/nft"
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
// and client-go's rest_client_* request metrics (the API clients of the process report to reg).
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
