package metrics

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// TestRESTExecCertTTL: the exec plugin certificate's TTL is +Inf while no plugin supplies a
// certificate, then the seconds from the clock to the expiry client-go sets, negative once past.
func TestRESTExecCertTTL(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewRESTClient(reg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	m.now = func() time.Time { return now }
	ttl := func() float64 {
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			if f.GetName() == RESTExecCertTTL {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("%s not exposed", RESTExecCertTTL)
		return 0
	}
	if got := ttl(); !math.IsInf(got, 1) {
		t.Errorf("no certificate: %s = %v, want +Inf", RESTExecCertTTL, got)
	}
	expiry := now.Add(90 * time.Minute)
	clientmetrics.ClientCertExpiry.Set(&expiry)
	if got := ttl(); got != 5400 {
		t.Errorf("certificate expiring in 90m: %s = %v, want 5400", RESTExecCertTTL, got)
	}
	now = now.Add(2 * time.Hour)
	if got := ttl(); got != -1800 {
		t.Errorf("certificate expired 30m ago: %s = %v, want -1800", RESTExecCertTTL, got)
	}
	clientmetrics.ClientCertExpiry.Set(nil)
	if got := ttl(); !math.IsInf(got, 1) {
		t.Errorf("certificate gone: %s = %v, want +Inf", RESTExecCertTTL, got)
	}
}

// TestRESTTransportCounts: client-go's transport hooks count on every RESTClient, by their
// labels (exec plugin exit code as a number).
func TestRESTTransportCounts(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewRESTClient(reg)
	if err != nil {
		t.Fatal(err)
	}
	clientmetrics.ExecPluginCalls.Increment(127, "plugin_not_found_error")
	clientmetrics.TransportCacheEntries.Observe(3)
	clientmetrics.TransportCacheEntries.Observe(1)
	clientmetrics.TransportCreateCalls.Increment("hit")
	clientmetrics.TransportCreateCalls.Increment("hit")
	clientmetrics.TransportCAReloads.Increment("failure", "read_error")
	clientmetrics.TransportCertRotationGCCalls.Increment()
	clientmetrics.TransportCacheGCCalls.Increment("skipped")
	for _, c := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{RESTExecCalls + `{code="127",call_status="plugin_not_found_error"}`, m.execCalls.WithLabelValues("127", "plugin_not_found_error"), 1},
		{RESTTransportCacheEntries, m.cacheEntries, 1},
		{RESTTransportCreateCalls + `{result="hit"}`, m.createCalls.WithLabelValues("hit"), 2},
		{RESTTransportCAReloads + `{result="failure",reason="read_error"}`, m.caReloads.WithLabelValues("failure", "read_error"), 1},
		{RESTTransportCertGCCalls, m.certGCs, 1},
		{RESTTransportCacheGCCalls + `{result="skipped"}`, m.cacheGCs.WithLabelValues("skipped"), 1},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
}
