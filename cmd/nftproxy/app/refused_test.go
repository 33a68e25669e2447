package app

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/explain"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/test/tier"
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
	tr.RecordKernelRefusal(key, tr.Service(key), &model.Rejection{Reason: model.ReasonKernelRefused, Message: "service ns/a: refused"})

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

// TestCostLimitThroughTheDaemon: with the daemon's wiring (its tracker, metrics and explain
// status, the proxier given --max-service-cost), a Service over the bound is logged at -v 0
// with its reason, counted in nftproxy_invalid_services_total{reason="CostLimit"}, listed in
// the status /rejections and explain read, and makes the Event scanner look again; the sync
// succeeds and programs the other Service.
func TestCostLimitThroughTheDaemon(t *testing.T) {
	var o Options
	if err := parseFlags("run", &o, runFlags, []string{"--manifests", t.TempDir(), "--max-service-cost", "40"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if o.MaxServiceCost != 40 {
		t.Fatalf("--max-service-cost 40 parsed as %d", o.MaxServiceCost)
	}
	builders, err := o.builders()
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	pm, err := metrics.NewProxy(reg, model.AllReasons())
	if err != nil {
		t.Fatal(err)
	}
	status, rescans, logs := explain.NewStatus(), 0, &tier.Buffer{}
	tr := newTracker(&o, model.GuardConfig{}, newLogger(0, logs), pm, status, func() { rescans++ })
	svc := func(name, ip string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	}
	eps := func(name string, n int) *discoveryv1.EndpointSlice {
		port, pname, proto := int32(80), "http", corev1.ProtocolTCP
		s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4,
			Ports: []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}}}
		for i := 0; i < n; i++ {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("198.18.128.%d", 10+i)}})
		}
		return s
	}
	tr.UpsertService(svc("small", "198.19.0.10"))
	tr.UpsertEndpointSlice(eps("small", 2))
	tr.UpsertService(svc("big", "198.19.0.11"))
	tr.UpsertEndpointSlice(eps("big", 30))
	fake := nft.NewFake()
	p := proxier.New(tr, fake, builders, pm, newLogger(0, logs), time.Now)
	p.SetMaxServiceCost(o.MaxServiceCost)
	if _, err := p.Sync(context.Background(), true); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if got := counterValue(t, reg, metrics.InvalidServices, "reason", model.ReasonCostLimit); got != 1 {
		t.Errorf("%s{reason=%q} = %v, want 1", metrics.InvalidServices, model.ReasonCostLimit, got)
	}
	if got := status.List(); len(got) != 1 || got[0].Service != "ns/big" || got[0].Reason != model.ReasonCostLimit {
		t.Errorf("status %+v, want ns/big with reason %s", got, model.ReasonCostLimit)
	}
	if rescans != 1 {
		t.Errorf("%d Event rescans asked, want 1", rescans)
	}
	if l := logs.String(); !strings.Contains(l, `"service rejected: not programmed" service="ns/big" reason="CostLimit"`) || !strings.Contains(l, "over the limit of 40 (--max-service-cost)") {
		t.Errorf("log at -v 0 lacks the rejection of ns/big with its limit:\n%s", l)
	}
	rs := ""
	for _, b := range builders {
		got, err := fake.Dump(context.Background(), b.Table())
		if err != nil {
			t.Fatal(err)
		}
		rs += nft.Render(got)
	}
	if !strings.Contains(rs, "ns/small/tcp/http") || strings.Contains(rs, "ns/big/") {
		t.Errorf("the kernel holds small: %v, big: %v; want small only", strings.Contains(rs, "ns/small/tcp/http"), strings.Contains(rs, "ns/big/"))
	}
}
