package metrics

import (
	"context"
	"net/url"
	"reflect"
	"runtime"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// kubeProxyFamily is one metric as kube-proxy exposes it: its name, type and label names.
type kubeProxyFamily struct {
	name   string
	typ    dto.MetricType
	labels []string
}

// kubeProxyMetrics are kube-proxy's metrics that nftproxy exposes under the same names, with
// their types and label names as kube-proxy v1.34.4 declares them in pkg/proxy/metrics/metrics.go
// (subsystem "kubeproxy"), so that dashboards and alerts built on kube-proxy read nftproxy
// unchanged. The names are written here, not taken from this package's constants: a renamed
// constant must fail this test.
var kubeProxyMetrics = []kubeProxyFamily{
	{"kubeproxy_sync_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{"kubeproxy_sync_full_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{"kubeproxy_sync_partial_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", dto.MetricType_GAUGE, []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", dto.MetricType_GAUGE, []string{"ip_family"}},
	{"kubeproxy_network_programming_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", dto.MetricType_GAUGE, nil},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_total", dto.MetricType_COUNTER, nil},
	{"kubeproxy_sync_proxy_rules_service_changes_pending", dto.MetricType_GAUGE, nil},
	{"kubeproxy_sync_proxy_rules_service_changes_total", dto.MetricType_COUNTER, nil},
	{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", dto.MetricType_COUNTER, []string{"ip_family"}},
	{"kubeproxy_proxy_healthz_total", dto.MetricType_COUNTER, []string{"code"}},
	{"kubeproxy_proxy_livez_total", dto.MetricType_COUNTER, []string{"code"}},
	{"kubeproxy_conntrack_reconciler_sync_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}},
	{"kubeproxy_conntrack_reconciler_deleted_entries_total", dto.MetricType_COUNTER, []string{"ip_family"}},
	{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", dto.MetricType_GAUGE, []string{"traffic_policy", "ip_family"}},
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

// componentMetrics are what every Kubernetes component exposes through component-base, with
// its types and label names as component-base v0.34.4 declares them (metrics/version.go and
// metrics/prometheus/restclient/metrics.go): the build information and client-go's request
// metrics. Written out, as kubeProxyMetrics are.
var componentMetrics = []kubeProxyFamily{
	{"kubernetes_build_info", dto.MetricType_GAUGE, []string{"major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"}},
	{"rest_client_requests_total", dto.MetricType_COUNTER, []string{"code", "method", "host"}},
	{"rest_client_request_duration_seconds", dto.MetricType_HISTOGRAM, []string{"verb", "host"}},
	{"rest_client_request_size_bytes", dto.MetricType_HISTOGRAM, []string{"verb", "host"}},
	{"rest_client_response_size_bytes", dto.MetricType_HISTOGRAM, []string{"verb", "host"}},
	{"rest_client_rate_limiter_duration_seconds", dto.MetricType_HISTOGRAM, []string{"verb", "host"}},
	{"rest_client_request_retries_total", dto.MetricType_COUNTER, []string{"code", "verb", "host"}},
}

// TestComponentParity drives client-go's metric hooks as a request does and checks the
// families they feed, and kubernetes_build_info, against component-base's.
func TestComponentParity(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	if err := RegisterBuildInfo(reg, "v1.2.3"); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRESTClient(reg); err != nil {
		t.Fatal(err)
	}
	ctx, u := context.Background(), url.URL{Scheme: "https", Host: "198.18.0.1:6443", Path: "/api/v1/services"}
	clientmetrics.RequestLatency.Observe(ctx, "LIST", u, 20*time.Millisecond)
	clientmetrics.RateLimiterLatency.Observe(ctx, "LIST", u, time.Millisecond)
	clientmetrics.RequestSize.Observe(ctx, "LIST", u.Host, 0)
	clientmetrics.ResponseSize.Observe(ctx, "LIST", u.Host, 4096)
	clientmetrics.RequestResult.Increment(ctx, "200", "GET", u.Host)
	clientmetrics.RequestRetry.IncrementRetry(ctx, "503", "GET", u.Host)
	checkParity(t, reg, componentMetrics)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != BuildInfo {
			continue
		}
		labels := map[string]string{}
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["major"] != "1" || labels["minor"] != "2" || labels["git_version"] != "v1.2.3" || labels["go_version"] != runtime.Version() {
			t.Errorf("%s labels %v; want major 1, minor 2, git_version v1.2.3, go_version %s", BuildInfo, labels, runtime.Version())
		}
		if v := f.GetMetric()[0].GetGauge().GetValue(); v != 1 {
			t.Errorf("%s = %v, want 1", BuildInfo, v)
		}
	}
}

func TestMajorMinor(t *testing.T) {
	for _, c := range []struct{ in, major, minor string }{
		{"v1.2.3", "1", "2"}, {"0.14.0-rc.1", "0", "14"}, {"dev", "", ""}, {"v1", "", ""}, {"vx.2", "", ""},
	} {
		if ma, mi := majorMinor(c.in); ma != c.major || mi != c.minor {
			t.Errorf("majorMinor(%q) = %q, %q; want %q, %q", c.in, ma, mi, c.major, c.minor)
		}
	}
}
