package app

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/proxy/explain"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// TestKernelRefusalIsCountedAndRescanned: the daemon's rejection callback counts a Service the
// kernel refused in nftproxy_invalid_services_total{reason="KernelRefused"}, records it in the
// status explain reads, and asks the Event scanner to look again (the informers did not see
// that rejection).
func TestKernelRefusalIsCountedAndRescanned(t *testing.T) {
	reg := prometheus.NewRegistry()
	pm, err := metrics.NewProxy(reg, model.AllReasons())
	if err != nil {
		t.Fatal(err)
	}
	rescans := 0
	status := explain.NewStatus()
	tr := newTracker(&Options{}, model.GuardConfig{}, logr.Discard(), pm, status, func() { rescans++ })
	tr.UpsertService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "198.19.0.10", ClusterIPs: []string{"198.19.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}})
	key := model.ServiceKey{Namespace: "ns", Name: "a"}
	tr.RefuseService(key, tr.Service(key), &model.Rejection{Reason: model.ReasonKernelRefused, Message: "service ns/a: refused"})

	if got := counterValue(t, reg, metrics.InvalidServices, "reason", model.ReasonKernelRefused); got != 1 {
		t.Errorf("%s{reason=%q} = %v, want 1", metrics.InvalidServices, model.ReasonKernelRefused, got)
	}
	if got := status.List(); len(got) != 1 || got[0].Service != "ns/a" || got[0].Reason != model.ReasonKernelRefused {
		t.Errorf("status %+v, want ns/a with reason %s", got, model.ReasonKernelRefused)
	}
	if rescans != 1 {
		t.Errorf("%d Event rescans asked, want 1", rescans)
	}
}

// counterValue reads one labelled counter from reg (-1 if absent).
func counterValue(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
