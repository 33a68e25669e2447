package metrics

import (
	"reflect"
	"sort"
	"testing"

	dto "github.com/prometheus/client_model/go"
)

// kubeProxyFamily is one metric as kube-proxy exposes it: its name, type and label names.
type kubeProxyFamily struct {
	name   string
	typ    dto.MetricType
	labels []string
}

// kubeProxyMetrics are kube-proxy's metrics (v1.34, pkg/proxy/metrics) that nftproxy exposes
// under the same names, with their types and label names as kube-proxy has them, so that
// dashboards and alerts built on kube-proxy read nftproxy unchanged.
var kubeProxyMetrics = []kubeProxyFamily{
	{KubeProxySync, dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{KubeProxyFullSync, dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{KubeProxyPartialSync, dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{KubeProxyLastTimestamp, dto.MetricType_GAUGE, []string{"ip_family"}},
	{KubeProxyProgramming, dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{KubeProxyEndpointsPend, dto.MetricType_GAUGE, nil},
	{KubeProxyEndpoints, dto.MetricType_COUNTER, nil},
	{KubeProxyChangesPend, dto.MetricType_GAUGE, nil},
	{KubeProxyChanges, dto.MetricType_COUNTER, nil},
	{KubeProxySyncFailures, dto.MetricType_COUNTER, []string{"ip_family"}},
	{KubeProxyHealthz, dto.MetricType_COUNTER, []string{"code"}},
	{KubeProxyLivez, dto.MetricType_COUNTER, []string{"code"}},
	{KubeProxyConntrackSync, dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{KubeProxyConntrackDeleted, dto.MetricType_COUNTER, []string{"ip_family"}},
}

// TestKubeProxyParity scrapes the daemon's registry and checks every kube-proxy metric nftproxy
// claims against kube-proxy's own: present, same type, same label names, and ip_family values
// kube-proxy's (IPv4, IPv6).
func TestKubeProxyParity(t *testing.T) {
	checkParity(t, daemonRegistry(t), kubeProxyMetrics)
}

// checkParity compares the families gathered from g with want.
func checkParity(t *testing.T, g interface {
	Gather() ([]*dto.MetricFamily, error)
}, want []kubeProxyFamily) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, f := range families {
		got[f.GetName()] = f
	}
	for _, w := range want {
		f := got[w.name]
		if f == nil {
			t.Errorf("%s: not exposed", w.name)
			continue
		}
		if f.GetType() != w.typ {
			t.Errorf("%s: type %v, want %v (kube-proxy's)", w.name, f.GetType(), w.typ)
		}
		for _, m := range f.GetMetric() {
			var names []string
			for _, l := range m.GetLabel() {
				names = append(names, l.GetName())
				if l.GetName() == "ip_family" && l.GetValue() != "IPv4" && l.GetValue() != "IPv6" {
					t.Errorf("%s: ip_family=%q, want IPv4 or IPv6", w.name, l.GetValue())
				}
			}
			sort.Strings(names)
			wantLabels := append([]string(nil), w.labels...)
			sort.Strings(wantLabels)
			if !reflect.DeepEqual(names, wantLabels) {
				t.Errorf("%s: labels %v, want %v (kube-proxy's)", w.name, names, wantLabels)
			}
		}
	}
}
