// Package metrics holds nftproxy's Prometheus collectors. Each component reports through a small
// observer interface of its own (proxier.Observer, allocator.Observer); the types here implement
// those interfaces, so only this package and cmd/ import Prometheus.
package metrics

import (
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
)

// Proxy metric names: nftproxy's own, and kube-proxy's (same names, types, labels and buckets as
// its v1.37 metrics, so dashboards built on kube-proxy work unchanged). A sync is one transaction
// for both families, so nftproxy's sync metrics carry no family label; kube-proxy runs one
// proxier per family and labels them ip_family, so the kube-proxy names observe the one sync
// once for each family nftproxy programs (what a dual-stack kube-proxy reports for its two).
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
	CleanupFailures        = "nftproxy_sync_cleanup_failures_total"
	KubeProxySync          = "kubeproxy_sync_proxy_rules_duration_seconds"
	KubeProxyFullSync      = "kubeproxy_sync_full_proxy_rules_duration_seconds"
	KubeProxyPartialSync   = "kubeproxy_sync_partial_proxy_rules_duration_seconds"
	KubeProxyProgramming   = "kubeproxy_network_programming_duration_seconds"
	KubeProxyLastTimestamp = "kubeproxy_sync_proxy_rules_last_timestamp_seconds"
	KubeProxyLastQueued    = "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds"
	KubeProxySyncFailures  = "kubeproxy_sync_proxy_rules_nftables_sync_failures_total"
	KubeProxyCleanupFail   = "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total"
	ServiceChanges         = "nftproxy_service_changes_total"
	ServiceChangesPending  = "nftproxy_service_changes_pending"
	KubeProxyHealthz       = "kubeproxy_proxy_healthz_total"
	KubeProxyLivez         = "kubeproxy_proxy_livez_total"
	KubeProxyChanges       = "kubeproxy_sync_proxy_rules_service_changes_total"
	KubeProxyChangesPend   = "kubeproxy_sync_proxy_rules_service_changes_pending"
	KubeProxyEndpoints     = "kubeproxy_sync_proxy_rules_endpoint_changes_total"
	KubeProxyEndpointsPend = "kubeproxy_sync_proxy_rules_endpoint_changes_pending"
)

// ipFamily is kube-proxy's label of the family a series is about (values IPv4, IPv6).
const ipFamily = "ip_family"

// syncBuckets spans a 1 ms partial sync to a multi-minute cold start at 50k Services.
var syncBuckets = prometheus.ExponentialBuckets(0.001, 2, 19)

// kubeProxySyncBuckets are kube-proxy's buckets of its sync and conntrack reconciler durations
// (1 ms to 16 s), kept on its names so that a query naming a bucket (le) reads alike.
var kubeProxySyncBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

// kubeProxyProgrammingBuckets are kube-proxy's network programming buckets: 0.25 s and 0.5 s,
// every second to 59 s, every 5 s to 115 s, every 30 s to 5 minutes.
var kubeProxyProgrammingBuckets = slices.Concat(prometheus.LinearBuckets(0.25, 0.25, 2), prometheus.LinearBuckets(1, 1, 59),
	prometheus.LinearBuckets(60, 5, 12), prometheus.LinearBuckets(120, 30, 7))

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

	kpSync, kpFull, kpPartial, kpProgramming *prometheus.HistogramVec
	kpLast, kpLastQueued                     *prometheus.GaugeVec
	kpFailures, kpCleanupFailures            *prometheus.CounterVec
	cleanupFailures                          *prometheus.CounterVec
	families                                 []string // ip_family values observed

	changes        *prometheus.CounterVec
	healthz, livez *prometheus.CounterVec
	reg            prometheus.Registerer
}

var _ proxier.Observer = (*Proxy)(nil)

func histogram(name, help string) prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: syncBuckets})
}

// familyHistogram is a kube-proxy histogram: one series per ip_family.
func familyHistogram(name, help string, buckets []float64) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, []string{ipFamily})
}

// NewProxy creates the proxy collectors and registers them on reg (the daemon's registry, or a
// fresh one in tests). reasons pre-creates the invalid-Services series so they read 0, not absent.
// families are the families nftproxy programs (--ip-families), the ip_family series of the
// kube-proxy names; none means both.
func NewProxy(reg prometheus.Registerer, reasons []string, families ...nft.Family) (*Proxy, error) {
	if len(families) == 0 {
		families = []nft.Family{nft.IPv4, nft.IPv6}
	}
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
		kpSync:        familyHistogram(KubeProxySync, "kube-proxy compatible: sync duration (any kind), by family.", kubeProxySyncBuckets),
		kpFull:        familyHistogram(KubeProxyFullSync, "kube-proxy compatible: full sync duration, by family.", kubeProxySyncBuckets),
		kpPartial:     familyHistogram(KubeProxyPartialSync, "kube-proxy compatible: partial sync duration, by family.", kubeProxySyncBuckets),
		kpProgramming: familyHistogram(KubeProxyProgramming, "kube-proxy compatible, by family: "+programmingHelp, kubeProxyProgrammingBuckets),
		kpLast: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: KubeProxyLastTimestamp,
			Help: "kube-proxy compatible: last successful sync time, by family."}, []string{ipFamily}),
		kpLastQueued: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: KubeProxyLastQueued,
			Help: "kube-proxy compatible: last time a change queued a sync, by family."}, []string{ipFamily}),
		kpFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: KubeProxySyncFailures,
			Help: "kube-proxy compatible: failed syncs, by family."}, []string{ipFamily}),
		cleanupFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: CleanupFailures,
			Help: "Cleanups after a committed sync that failed, by family: the deletion of affinity entries of removed endpoints (a transaction of its own, tried again after the next sync). Stale chains go in the sync's own transaction."},
			[]string{"family"}),
		kpCleanupFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: KubeProxyCleanupFail,
			Help: "kube-proxy compatible: failed cleanup transactions after a sync, by family (see " + CleanupFailures + ")."}, []string{ipFamily}),
	}
	for _, f := range families {
		l := familyLabel(f)
		m.families = append(m.families, l)
		m.kpFailures.WithLabelValues(l)
		m.kpCleanupFailures.WithLabelValues(l)
		m.cleanupFailures.WithLabelValues(l)
	}
	for _, r := range reasons {
		m.invalid.WithLabelValues(r)
	}
	for _, k := range []string{"full", "partial"} {
		m.duration.WithLabelValues(k)
	}
	m.changes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: ServiceChanges,
		Help: "Service changes (a Service or its endpoints added, changed or removed) taken by syncs."}, nil)
	m.healthz = prometheus.NewCounterVec(prometheus.CounterOpts{Name: KubeProxyHealthz, Help: "kube-proxy compatible: /healthz answers by HTTP code."}, []string{"code"})
	m.livez = prometheus.NewCounterVec(prometheus.CounterOpts{Name: KubeProxyLivez, Help: "kube-proxy compatible: /livez answers by HTTP code."}, []string{"code"})
	cs := []prometheus.Collector{m.duration, m.failures, m.ops, m.bytes, m.programming, m.repairs, m.objects, m.invalid, m.last,
		m.kpSync, m.kpFull, m.kpPartial, m.kpProgramming, m.kpLast, m.kpLastQueued, m.kpFailures, m.changes, m.healthz, m.livez,
		m.cleanupFailures, m.kpCleanupFailures}
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

// WatchPending exports pending(), the number of Services whose model changed and waits for the
// sync loop, as nftproxy_service_changes_pending (kube-proxy's names: WatchChanges).
func (m *Proxy) WatchPending(pending func() int) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: ServiceChangesPending, Help: "Services whose model changed (the Service or its endpoints) and not yet taken by a sync."},
		func() float64 { return float64(pending()) })
	return m.reg.Register(g)
}

// Changed counts Service changes taken by a sync (proxier.Observer).
func (m *Proxy) Changed(n int) {
	m.changes.WithLabelValues().Add(float64(n))
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
	for _, f := range m.families {
		m.kpSync.WithLabelValues(f).Observe(d.Seconds())
		kp.WithLabelValues(f).Observe(d.Seconds())
	}
	if err != nil {
		m.failures.Inc()
		for _, f := range m.families {
			m.kpFailures.WithLabelValues(f).Inc()
		}
		return
	}
	m.ops.Add(float64(res.Ops))
	m.bytes.Add(float64(res.Stats.Bytes))
	m.repairs.Add(float64(res.Repairs))
	for _, fam := range res.CleanupFailed {
		m.cleanupFailures.WithLabelValues(familyLabel(fam)).Inc()
		m.kpCleanupFailures.WithLabelValues(familyLabel(fam)).Inc()
	}
	for fam, c := range res.Objects {
		f := familyLabel(fam)
		m.objects.WithLabelValues(f, "chains").Set(float64(c.Chains))
		m.objects.WithLabelValues(f, "rules").Set(float64(c.Rules))
		m.objects.WithLabelValues(f, "sets").Set(float64(c.Sets))
		m.objects.WithLabelValues(f, "elements").Set(float64(c.Elements))
	}
	now := float64(time.Now().UnixNano()) / 1e9
	m.last.Set(now)
	for _, f := range m.families {
		m.kpLast.WithLabelValues(f).Set(now)
	}
}

// Queued records that a change queued a sync (kube-proxy's last-queued timestamp).
func (m *Proxy) Queued() {
	now := float64(time.Now().UnixNano()) / 1e9
	for _, f := range m.families {
		m.kpLastQueued.WithLabelValues(f).Set(now)
	}
}

// Programmed implements proxier.Observer.
func (m *Proxy) Programmed(latency time.Duration) {
	m.programming.Observe(latency.Seconds())
	for _, f := range m.families {
		m.kpProgramming.WithLabelValues(f).Observe(latency.Seconds())
	}
}

// Rejected counts a Service rejected for reason.
func (m *Proxy) Rejected(reason string) { m.invalid.WithLabelValues(reason).Inc() }

func familyLabel(f nft.Family) string {
	if f == nft.IPv6 {
		return "IPv6"
	}
	return "IPv4"
}
