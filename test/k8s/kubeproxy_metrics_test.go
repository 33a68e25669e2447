package k8s

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/tier"
)

// TestKubeProxyMetricsServed runs the daemon as the DaemonSet does and reads its /metrics as a
// Prometheus built for kube-proxy would: client-go's requests to the API server it watches
// (rest_client_requests_total) and the transports its clients took, kubernetes_build_info, the
// Service and endpoint changes it received, and for each family it programs the sync histogram,
// the last-queued time and the ports without local endpoints. Go's profiles are not served (no --profiling).
func TestKubeProxyMetricsServed(t *testing.T) {
	e := newEnv(t, nil)
	e.waitUntil("daemon serving /metrics", func() (bool, string) {
		_, err := tier.Get(e.ctx, e.lab.Node, "http://"+e.metricsAddr+"/metrics")
		return err == nil, fmt.Sprint(err)
	})
	e.waitHealth("/healthz after the first sync", "/healthz", " 200 ")
	s := httpService("kpm", 42, 1)
	e.createService(s)
	e.waitProgrammed(s)

	r, err := tier.Get(e.ctx, e.lab.Node, "http://"+e.metricsAddr+"/metrics")
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	// value returns the value of the first series whose line starts with prefix and contains
	// every one of labels, or -1.
	value := func(prefix string, labels ...string) float64 {
		for _, l := range strings.Split(r.Body, "\n") {
			if !strings.HasPrefix(l, prefix) {
				continue
			}
			ok := true
			for _, want := range labels {
				ok = ok && strings.Contains(l, want)
			}
			if i := strings.LastIndexByte(l, ' '); ok && i > 0 {
				if v, err := strconv.ParseFloat(l[i+1:], 64); err == nil {
					return v
				}
			}
		}
		return -1
	}
	for _, c := range []struct {
		what    string
		prefix  string
		labels  []string
		atLeast float64
	}{
		{"API requests counted", "rest_client_requests_total{", []string{`code="200"`, `method="GET"`}, 1},
		{"API request latency", "rest_client_request_duration_seconds_count{", []string{`verb="GET"`}, 1},
		{"API transports asked of client-go's cache", "rest_client_transport_create_calls_total{", nil, 1},
		{"exec plugin certificate TTL (+Inf: none)", "rest_client_exec_plugin_ttl_seconds ", nil, 0},
		{"build information", "kubernetes_build_info{", []string{`git_version="`, `go_version="go`}, 1},
		{"Service changes", "kubeproxy_sync_proxy_rules_service_changes_total ", nil, 1},
		{"endpoint changes", "kubeproxy_sync_proxy_rules_endpoint_changes_total ", nil, 1},
		{"IPv4 syncs", "kubeproxy_sync_proxy_rules_duration_seconds_count{", []string{`ip_family="IPv4"`}, 1},
		{"IPv6 syncs", "kubeproxy_sync_proxy_rules_duration_seconds_count{", []string{`ip_family="IPv6"`}, 1},
		{"last queued sync", "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{", []string{`ip_family="IPv4"`}, 1},
		{"no local endpoints (internal)", "kubeproxy_sync_proxy_rules_no_local_endpoints_total{", []string{`ip_family="IPv4"`, `traffic_policy="internal"`}, 0},
		{"no local endpoints (external)", "kubeproxy_sync_proxy_rules_no_local_endpoints_total{", []string{`ip_family="IPv6"`, `traffic_policy="external"`}, 0},
	} {
		if got := value(c.prefix, c.labels...); got < c.atLeast {
			t.Errorf("%s: %s%v reads %v, want at least %v", c.what, c.prefix, c.labels, got, c.atLeast)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", r.Body)
	}
	p, err := tier.Get(e.ctx, e.lab.Node, "http://"+e.metricsAddr+"/debug/pprof/")
	if err != nil {
		t.Fatalf("/debug/pprof/: %v", err)
	}
	if !strings.Contains(p.Status, "404") {
		t.Errorf("/debug/pprof/ without --profiling: %s, want 404", p.Status)
	}
}
