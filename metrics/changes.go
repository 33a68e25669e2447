package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

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
