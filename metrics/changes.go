package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// WatchChanges exports counts(), the Service and EndpointSlice events the model has received
// (model.Tracker.ChangeCounts), under kube-proxy's names: its service and endpoint changes,
// total and pending. Like kube-proxy's, they carry no label.
func (m *Proxy) WatchChanges(counts func() model.ChangeCounts) error {
	cs := []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: KubeProxyChanges,
			Help: "kube-proxy compatible: Service events received (added, updated, deleted)."},
			func() float64 { return float64(counts().ServiceEvents) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: KubeProxyChangesPend,
			Help: "kube-proxy compatible: Services changed and not yet taken by a sync."},
			func() float64 { return float64(counts().PendingServices) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: KubeProxyEndpoints,
			Help: "kube-proxy compatible: EndpointSlice events received (added, updated, deleted)."},
			func() float64 { return float64(counts().EndpointSliceEvents) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: KubeProxyEndpointsPend,
			Help: "kube-proxy compatible: EndpointSlice changes not yet taken by a sync."},
			func() float64 { return float64(counts().PendingEndpointSliceChanges) }),
	}
	for i, c := range cs {
		if err := m.reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				m.reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}

// KubeProxyNoLocalEndpoints is kube-proxy's gauge (despite its _total) of Service ports whose
// Local traffic policy leaves them without an endpoint on the node.
const KubeProxyNoLocalEndpoints = "kubeproxy_sync_proxy_rules_no_local_endpoints_total"

// NoLocalEndpoints is, for one family, how many Service ports drop ClusterIP traffic
// (internalTrafficPolicy Local: Internal) or external traffic (externalTrafficPolicy Local:
// External) on this node for want of a local endpoint.
type NoLocalEndpoints struct {
	Family             nft.Family
	Internal, External int
}

// noLocalCollector computes kubeproxy_sync_proxy_rules_no_local_endpoints_total at scrape time.
type noLocalCollector struct {
	desc  *prometheus.Desc
	count func() []NoLocalEndpoints
}

func (c noLocalCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c noLocalCollector) Collect(ch chan<- prometheus.Metric) {
	for _, n := range c.count() {
		f := familyLabel(n.Family)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n.Internal), "internal", f)
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n.External), "external", f)
	}
}

// WatchNoLocalEndpoints exports count() as kube-proxy's
// kubeproxy_sync_proxy_rules_no_local_endpoints_total{traffic_policy, ip_family}, computed
// when scraped (kube-proxy sets it after each sync; nftproxy's syncs touch only what changed,
// so the count over every Service is left to the scrape).
func (m *Proxy) WatchNoLocalEndpoints(count func() []NoLocalEndpoints) error {
	return m.reg.Register(noLocalCollector{count: count, desc: prometheus.NewDesc(KubeProxyNoLocalEndpoints,
		"kube-proxy compatible: Service ports with a Local traffic policy and no endpoint on this node, by traffic policy (internal, external) and family.",
		[]string{"traffic_policy", ipFamily}, nil)})
}
