// Package metrics holds nftproxy's Prometheus collectors. Each component reports through a small
// observer interface of its own (proxier.Observer, allocator.Observer); the types here implement
// those interfaces, so only this package and cmd/ import Prometheus.
package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
)

// Proxy metric names (nftproxy's own). A sync is one transaction for both families, so sync
// metrics carry no family label; object gauges do.
const (
	SyncDuration           = "nftproxy_sync_duration_seconds"
	SyncFailures           = "nftproxy_sync_failures_total"
	SyncOps                = "nftproxy_sync_operations_total"
	SyncBytes              = "nftproxy_sync_bytes_total"
	NetworkProgramming     = "nftproxy_network_programming_duration_seconds"
	DriftRepairs           = "nftproxy_drift_repairs_total"
	NFTObjects             = "nftproxy_nft_objects"
	InvalidServices        = "nftproxy_invalid_services_total"
	LastSyncTimestamp      = "nftproxy_last_sync_timestamp_seconds"
	KubeProxySync          = "kubeproxy_sync_proxy_rules_duration_seconds"
	KubeProxyFullSync      = "kubeproxy_sync_full_proxy_rules_duration_seconds"
	KubeProxyPartialSync   = "kubeproxy_sync_partial_proxy_rules_duration_seconds"
	KubeProxyProgramming   = "kubeproxy_network_programming_duration_seconds"
	KubeProxyLastTimestamp = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	KubeProxySyncFailures  = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"
	ServiceChanges         = "nftproxy_service_changes_total"
	ServiceChangesPending  = "nftproxy_service_changes_pending"
	KubeProxyHealthz       = "kubeproxy_proxy_healthz_total"
	KubeProxyLivez         = "kubeproxy_proxy_livez_total"
	KubeProxyChanges       = "kubeproxy_sync_proxy_rules_service_changes_total"
	KubeProxyChangesPend   = "kubeproxy_sync_proxy_rules_service_changes_pending"
)

// syncBuckets spans a 1 ms partial sync to a multi-minute cold start at 50k Services.
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 19)

// programmingHelp says where the programming latency starts: as upstream kube-proxy, at the
// trigger time the EndpointSlice controller writes on the slice; without one, at receipt.
const programmingHelp = "Network programming latency: one observation per EndpointSlice change, from its " +
	"endpoints.kubernetes.io/last-change-trigger-time annotation (as kube-proxy) to the commit of its rules. " +
	"A change without a trigger time (manifest mode without the annotation, a Service object change, a deleted slice, " +
	"a trigger time older than this process) is measured from when nftproxy received it."

// Proxy implements proxier.Observer and counts rejected Services.
type Proxy struct {
	duration    *prometheus.HistogramVec
	failures    prometheus.Counter
	ops         prometheus.Counter
	bytes       prometheus.Counter
	programming prometheus.Histogram
	repairs     prometheus.Counter
	objects     *prometheus.GaugeVec
	invalid     *prometheus.CounterVec
	last        prometheus.Gauge

	kpSync, kpFull, kpPartial, kpProgramming prometheus.Histogram
	kpLast                                   prometheus.Gauge
	kpFailures                               prometheus.Counter

	changes, kpChanges *prometheus.CounterVec
	healthz, livez     *prometheus.CounterVec
	registered         []prometheus.Collector
	reg                prometheus.Registerer
}

var _ proxier.Observer = (*Proxy)(nil)

func histogram(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: syncBuckets})
}

// NewProxy creates the proxy collectors and registers them on reg (the daemon's registry, or a
// fresh one in tests). reasons pre-creates the invalid-Services series so they read 0, not absent.
func NewProxy(reg prometheus.Registerer, reasons []string) (*Proxy, error) {
	m := &Proxy{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: SyncDuration, Buckets: syncBuckets,
			Help: "Time of one sync (build, diff, kernel commit); kind is full (kernel read back and repaired) or partial."}, []string{"kind"}),
		failures:    prometheus.NewCounter(prometheus.CounterOpts{Name: SyncFailures, Help: "Syncs whose transaction failed; the previous ruleset stayed in place."}),
		ops:         prometheus.NewCounter(prometheus.CounterOpts{Name: SyncOps, Help: "nftables operations committed."}),
		bytes:       prometheus.NewCounter(prometheus.CounterOpts{Name: SyncBytes, Help: "Bytes of netlink messages sent to the kernel."}),
		programming: histogram(NetworkProgramming, programmingHelp),
		repairs:     prometheus.NewCounter(prometheus.CounterOpts{Name: DriftRepairs, Help: "Kernel objects found different from what nftproxy had applied (someone else changed our tables) and repaired by a full sync."}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: NFTObjects,
			Help: "Objects in nftproxy's tables after the last sync, by family and kind (chains, rules, sets, elements)."}, []string{"family", "kind"}),
		invalid: prometheus.NewCounterVec(prometheus.CounterOpts{Name: InvalidServices,
			Help: "Services rejected (not programmed; for NodePortNotAssigned, programmed without that node port), by reason; see proxy/model/REASONS.md."}, []string{"reason"}),
		last:          prometheus.NewGauge(prometheus.GaugeOpts{Name: LastSyncTimestamp, Help: "Unix time of the last successful sync."}),
		kpSync:        histogram(KubeProxySync, "kube-proxy compatible: sync duration (any kind)."),
		kpFull:        histogram(KubeProxyFullSync, "kube-proxy compatible: full sync duration."),
		kpPartial:     histogram(KubeProxyPartialSync, "kube-proxy compatible: partial sync duration."),
		kpProgramming: histogram(KubeProxyProgramming, "kube-proxy compatible: "+programmingHelp),
		kpLast:        prometheus.NewGauge(prometheus.GaugeOpts{Name: KubeProxyLastTimestamp, Help: "kube-proxy compatible: last successful sync time."}),
		kpFailures:    prometheus.NewCounter(prometheus.CounterOpts{Name: KubeProxySyncFailures, Help: "kube-proxy compatible: failed syncs."}),
	}
	for _, r := range reasons {
		m.invalid.WithLabelValues(r)
	}
	for _, k := range []string{"full", "partial"} {
		m.duration.WithLabelValues(k)
	}
	m.changes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: ServiceChanges,
		Help: "Service changes (a Service or its endpoints added, changed or removed) taken by syncs."}, nil)
	m.kpChanges = prometheus.NewCounterVec(prometheus.CounterOpts{Name: KubeProxyChanges, Help: "kube-proxy compatible: service changes."}, nil)
	m.healthz = prometheus.NewCounterVec(prometheus.CounterOpts{Name: KubeProxyHealthz, Help: "kube-proxy compatible: /healthz answers by HTTP code."}, []string{"code"})
	m.livez = prometheus.NewCounterVec(prometheus.CounterOpts{Name: KubeProxyLivez, Help: "kube-proxy compatible: /livez answers by HTTP code."}, []string{"code"})
	cs := []prometheus.Collector{m.duration, m.failures, m.ops, m.bytes, m.programming, m.repairs, m.objects, m.invalid, m.last,
		m.kpSync, m.kpFull, m.kpPartial, m.kpProgramming, m.kpLast, m.kpFailures, m.changes, m.kpChanges, m.healthz, m.livez}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	m.reg = reg
	return m, nil
}

// WatchPending exports pending(), the number of Service changes waiting for the sync loop, as
// nftproxy_service_changes_pending (and kube-proxy's name).
func (m *Proxy) WatchPending(pending func() int) error {
	for _, name := range []string{ServiceChangesPending, KubeProxyChangesPend} {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: "Service changes seen and not yet taken by a sync."},
			func() float64 { return float64(pending()) })
		if err := m.reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}

// Changed counts Service changes taken by a sync (proxier.Observer).
func (m *Proxy) Changed(n int) {
	m.changes.WithLabelValues().Add(float64(n))
	m.kpChanges.WithLabelValues().Add(float64(n))
}

// Served counts health answers (health.State.Served).
func (m *Proxy) Served(path string, code int) {
	c := m.healthz
	if path == "/livez" {
		c = m.livez
	}
	c.WithLabelValues(fmt.Sprint(code)).Inc()
}

// Synced implements proxier.Observer.
func (m *Proxy) Synced(full bool, d time.Duration, res reconciler.Result, err error) {
	kind, kp := "partial", m.kpPartial
	if full {
		kind, kp = "full", m.kpFull
	}
	m.duration.WithLabelValues(kind).Observe(d.Seconds())
	m.kpSync.Observe(d.Seconds())
	kp.Observe(d.Seconds())
	if err != nil {
		m.failures.Inc()
		m.kpFailures.Inc()
		return
	}
	m.ops.Add(float64(res.Ops))
	m.bytes.Add(float64(res.Stats.Bytes))
	m.repairs.Add(float64(res.Repairs))
	for fam, c := range res.Objects {
		f := familyLabel(fam)
		m.objects.WithLabelValues(f, "chains").Set(float64(c.Chains))
		m.objects.WithLabelValues(f, "rules").Set(float64(c.Rules))
		m.objects.WithLabelValues(f, "sets").Set(float64(c.Sets))
		m.objects.WithLabelValues(f, "elements").Set(float64(c.Elements))
	}
	now := float64(time.Now().UnixNano()) / 1e9
	m.last.Set(now)
	m.kpLast.Set(now)
}

// Programmed implements proxier.Observer.
func (m *Proxy) Programmed(latency time.Duration) {
	m.programming.Observe(latency.Seconds())
	m.kpProgramming.Observe(latency.Seconds())
}

// Rejected counts a Service rejected for reason.
func (m *Proxy) Rejected(reason string) { m.invalid.WithLabelValues(reason).Inc() }

func familyLabel(f nft.Family) string {
	if f == nft.IPv6 {
		return "IPv6"
	}
	return "IPv4"
}
