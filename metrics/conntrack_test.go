package metrics

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestConntrackMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewConntrack(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ConntrackCleaned("IPv4", 3, 2*time.Millisecond, nil)
	m.ConntrackCleaned("IPv4", 2, time.Millisecond, errors.New("dump interrupted"))
	m.ConntrackCleaned("IPv6", 1, time.Millisecond, nil)

	tests := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{ConntrackDeleted + " IPv4", m.deleted.WithLabelValues("IPv4"), 5},
		{ConntrackDeleted + " IPv6", m.deleted.WithLabelValues("IPv6"), 1},
		{KubeProxyConntrackDeleted + " IPv4", m.kpDeleted.WithLabelValues("IPv4"), 5},
		{KubeProxyConntrackDeleted + " IPv6", m.kpDeleted.WithLabelValues("IPv6"), 1},
		{ConntrackCleanupFailures + " IPv4", m.failures.WithLabelValues("IPv4"), 1},
		{ConntrackCleanupFailures + " IPv6", m.failures.WithLabelValues("IPv6"), 0},
	}
	for _, tc := range tests {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, ConntrackCleanupDuration, KubeProxyConntrackSync); err != nil || n != 4 {
		t.Errorf("duration series: got %d (err %v), want 4 (2 names x 2 families)", n, err)
	}
	if lint, err := testutil.GatherAndLint(reg); err != nil || len(lint) > 0 {
		t.Errorf("metric lint problems: %v %v", lint, err)
	}
	if _, err := NewConntrack(reg); err == nil {
		t.Error("second NewConntrack on the same registry: got nil error, want a duplicate registration error")
	}
}
