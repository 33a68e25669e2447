package metrics

import (
	"context"
	"math"
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

// kubeProxyFamily is one metric as kube-proxy exposes it: its name, type, label names and, for a
// histogram, its bucket upper bounds.
type kubeProxyFamily struct {
	name    string
	typ     dto.MetricType
	labels  []string
	buckets []float64
}

// kube-proxy's buckets, as its pkg/proxy/metrics/metrics.go declares them (component-base's
// ExponentialBuckets, LinearBuckets and MergeBuckets are client_golang's).
var (
	kubeProxySyncLe        = prometheus.ExponentialBuckets(0.001, 2, 15)
	kubeProxyProgrammingLe = append(append(append(prometheus.LinearBuckets(0.25, 0.25, 2), prometheus.LinearBuckets(1, 1, 59)...),
		prometheus.LinearBuckets(60, 5, 12)...), prometheus.LinearBuckets(120, 30, 7)...)
)

// kubeProxyMetrics are the metrics kube-proxy v1.37.2 registers in nftables mode (RegisterMetrics
// in pkg/proxy/metrics/metrics.go, subsystem "kubeproxy", feature gates at their defaults), with
// their types, label names and buckets, so that dashboards and alerts built on kube-proxy read
// nftproxy unchanged. The names are written here, not taken from this package's constants: a
// renamed constant must fail this test.
var kubeProxyMetrics = []kubeProxyFamily{
	{"kubeproxy_sync_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}, kubeProxySyncLe},
	{"kubeproxy_sync_full_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}, kubeProxySyncLe},
	{"kubeproxy_sync_partial_proxy_rules_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}, kubeProxySyncLe},
	{"kubeproxy_sync_proxy_rules_last_timestamp_seconds", dto.MetricType_GAUGE, []string{"ip_family"}, nil},
	{"kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds", dto.MetricType_GAUGE, []string{"ip_family"}, nil},
	{"kubeproxy_network_programming_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}, kubeProxyProgrammingLe},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_pending", dto.MetricType_GAUGE, nil, nil},
	{"kubeproxy_sync_proxy_rules_endpoint_changes_total", dto.MetricType_COUNTER, nil, nil},
	{"kubeproxy_sync_proxy_rules_service_changes_pending", dto.MetricType_GAUGE, nil, nil},
	{"kubeproxy_sync_proxy_rules_service_changes_total", dto.MetricType_COUNTER, nil, nil},
	{"kubeproxy_sync_proxy_rules_nftables_sync_failures_total", dto.MetricType_COUNTER, []string{"ip_family"}, nil},
	{"kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total", dto.MetricType_COUNTER, []string{"ip_family"}, nil},
	{"kubeproxy_proxy_healthz_total", dto.MetricType_COUNTER, []string{"code"}, nil},
	{"kubeproxy_proxy_livez_total", dto.MetricType_COUNTER, []string{"code"}, nil},
	{"kubeproxy_conntrack_reconciler_sync_duration_seconds", dto.MetricType_HISTOGRAM, []string{"ip_family"}, kubeProxySyncLe},
	{"kubeproxy_conntrack_reconciler_deleted_entries_total", dto.MetricType_COUNTER, []string{"ip_family"}, nil},
	{"kubeproxy_sync_proxy_rules_no_local_endpoints_total", dto.MetricType_GAUGE, []string{"traffic_policy", "ip_family"}, nil},
}

// kubeProxyNotApplicable are the other metrics kube-proxy v1.37.2 declares, and why nftproxy has
// none of them. With kubeProxyMetrics they are every metric of that file (TestKubeProxyParity
// checks that no name is in both lists and that none of these is exposed).
var kubeProxyNotApplicable = map[string]string{
	"kubeproxy_iptables_ct_state_invalid_dropped_packets_total":              "iptables mode only (nfacct counter of its INVALID-drop rule); the nftables mode has no such rule",
	"kubeproxy_iptables_localhost_nodeports_accepted_packets_total":          "iptables mode only; nftproxy never serves node ports on 127.0.0.1",
	"kubeproxy_sync_proxy_rules_iptables_restore_failures_total":             "iptables and IPVS modes only (iptables-restore)",
	"kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total":     "iptables mode only",
	"kubeproxy_sync_proxy_rules_iptables_total":                              "iptables mode only (rule counts per iptables table); nftproxy_nft_objects counts its objects",
	"kubeproxy_sync_proxy_rules_iptables_last":                               "iptables mode only",
	"kubeproxy_sync_proxy_rules_winkernel_lb_create_failures_total":          "Windows (kernelspace mode) only",
	"kubeproxy_sync_proxy_rules_winkernel_lb_update_failures_total":          "Windows (kernelspace mode) only",
	"kubeproxy_sync_proxy_rules_winkernel_lb_delete_failures_total":          "Windows (kernelspace mode) only",
	"kubeproxy_nftables_localhost_nodeport_listeners":                        "alpha gate KubeProxyNFTablesLocalhostNodePorts (off by default); nftproxy has no localhost node-port proxy",
	"kubeproxy_nftables_localhost_nodeport_listener_creation_failures_total": "same gate; no localhost node-port proxy",
	"kubeproxy_nftables_localhost_nodeport_rejected_packets_total":           "same gate; nftproxy adds no rule for localhost node ports (loopback traffic to a node port is not NAT'ed)",
}

// TestKubeProxyParity scrapes the daemon's registry and checks every kube-proxy metric nftproxy
// claims against kube-proxy's own: present, same type, same label names, same buckets, and
// ip_family values kube-proxy's (IPv4, IPv6); and that no metric kube-proxy has only in its other
// modes is exposed.
func TestKubeProxyParity(t *testing.T) {
	reg := daemonRegistry(t)
	checkParity(t, reg, kubeProxyMetrics)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if why, ok := kubeProxyNotApplicable[f.GetName()]; ok {
			t.Errorf("%s is exposed, but it does not apply to nftproxy: %s", f.GetName(), why)
		}
	}
	for _, w := range kubeProxyMetrics {
		if _, ok := kubeProxyNotApplicable[w.name]; ok {
			t.Errorf("%s is both claimed and listed as not applicable", w.name)
		}
	}
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
			if w.buckets == nil {
				continue
			}
			var le []float64
			for _, b := range m.GetHistogram().GetBucket() {
				le = append(le, b.GetUpperBound())
			}
			if !sameBounds(le, w.buckets) {
				t.Errorf("%s: buckets %v, want %v (kube-proxy's)", w.name, le, w.buckets)
			}
		}
	}
}

// sameBounds compares bucket bounds as the exposition prints them (to 1e-9 relative).
func sameBounds(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9*math.Abs(b[i]) {
			return false
		}
	}
	return true
}

// componentMetrics are what every Kubernetes component exposes through component-base, with
// its types, label names and buckets as component-base v0.37.2 declares them (metrics/version.go
// and metrics/prometheus/restclient/metrics.go, whose RegisterFn registers every rest_client_*
// one listed here): the build information and client-go's metrics of the requests, the exec
// credential plugins and the transport cache. Written out, as kubeProxyMetrics are.
var componentMetrics = []kubeProxyFamily{
	{"kubernetes_build_info", dto.MetricType_GAUGE, []string{"major", "minor", "git_version", "git_commit", "git_tree_state", "build_date", "go_version", "compiler", "platform"}, nil},
	{"rest_client_requests_total", dto.MetricType_COUNTER, []string{"code", "method", "host"}, nil},
	{"rest_client_request_duration_seconds", dto.MetricType_HISTOGRAM, []string{"verb", "host"}, componentLatencyLe},
	{"rest_client_request_size_bytes", dto.MetricType_HISTOGRAM, []string{"verb", "host"}, componentSizeLe},
	{"rest_client_response_size_bytes", dto.MetricType_HISTOGRAM, []string{"verb", "host"}, componentSizeLe},
	{"rest_client_rate_limiter_duration_seconds", dto.MetricType_HISTOGRAM, []string{"verb", "host"}, componentLatencyLe},
	{"rest_client_request_retries_total", dto.MetricType_COUNTER, []string{"code", "verb", "host"}, nil},
	{"rest_client_exec_plugin_ttl_seconds", dto.MetricType_GAUGE, nil, nil},
	{"rest_client_exec_plugin_certificate_rotation_age", dto.MetricType_HISTOGRAM, nil,
		[]float64{600, 1800, 3600, 14400, 86400, 604800, 2592000, 7776000, 15552000, 31104000, 124416000}},
	{"rest_client_exec_plugin_call_total", dto.MetricType_COUNTER, []string{"code", "call_status"}, nil},
	{"rest_client_transport_cache_entries", dto.MetricType_GAUGE, nil, nil},
	{"rest_client_transport_create_calls_total", dto.MetricType_COUNTER, []string{"result"}, nil},
	{"rest_client_transport_ca_reload_total", dto.MetricType_COUNTER, []string{"result", "reason"}, nil},
	{"rest_client_transport_cert_rotation_gc_calls_total", dto.MetricType_COUNTER, nil, nil},
	{"rest_client_transport_cache_gc_calls_total", dto.MetricType_COUNTER, []string{"result"}, nil},
}

// component-base v0.37.2's request buckets: latency 5 ms to a minute, size 64 B to 16 MB.
var (
	componentLatencyLe = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60}
	componentSizeLe    = []float64{64, 256, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216}
)

// componentNotApplicable are the other rest_client_* metrics component-base v0.37.2 declares,
// and why nftproxy exposes none of them. With componentMetrics they are every metric of its
// restclient package.
var componentNotApplicable = map[string]string{
	"rest_client_dns_resolution_duration_seconds": "declared, and fed by client-go, but never registered by component-base (absent from its RegisterFn), so kube-proxy v1.37 does not expose it",
	"rest_client_exec_plugin_policy_call_total":   "new in component-base v0.37 but never registered (absent from its RegisterFn), so kube-proxy v1.37 does not expose it; its declared label names are the values (allowed, denied) of the one label client-go passes",
}

// TestComponentParity drives every client-go metric hook as client-go does and checks the
// families they feed, and kubernetes_build_info, against component-base's; the hooks
// component-base registers nothing for must expose nothing.
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
	clientmetrics.ClientCertRotationAge.Observe(24 * time.Hour)
	clientmetrics.ExecPluginCalls.Increment(0, "no_error")
	clientmetrics.TransportCacheEntries.Observe(2)
	clientmetrics.TransportCreateCalls.Increment("miss")
	clientmetrics.TransportCAReloads.Increment("success", "updated")
	clientmetrics.TransportCertRotationGCCalls.Increment()
	clientmetrics.TransportCacheGCCalls.Increment("deleted")
	clientmetrics.ResolverLatency.Observe(ctx, u.Host, time.Millisecond)
	clientmetrics.ExecPluginPolicyCalls.Increment("allowed")
	checkParity(t, reg, componentMetrics)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if why, ok := componentNotApplicable[f.GetName()]; ok {
			t.Errorf("%s is exposed, but kube-proxy has none: %s", f.GetName(), why)
		}
	}
	for _, w := range componentMetrics {
		if _, ok := componentNotApplicable[w.name]; ok {
			t.Errorf("%s is both claimed and listed as not applicable", w.name)
		}
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
