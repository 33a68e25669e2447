package metrics

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestHealthCheckMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewHealthCheck(reg)
	if err != nil {
		t.Fatal(err)
	}
	m.ListenFailed(32000, errors.New("address in use"))
	m.ListenFailed(32000, errors.New("address in use"))
	m.Listeners(3, 1)
	tests := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{HealthCheckListenFailures, m.failures, 2},
		{HealthCheckNodePorts + " serving", m.ports.WithLabelValues("serving"), 3},
		{HealthCheckNodePorts + " failed", m.ports.WithLabelValues("failed"), 1},
	}
	for _, tc := range tests {
		if got := testutil.ToFloat64(tc.c); got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, got, tc.want)
		}
	}
	if lint, err := testutil.GatherAndLint(reg); err != nil || len(lint) > 0 {
		t.Errorf("metric lint problems: %v %v", lint, err)
	}
	if _, err := NewHealthCheck(reg); err == nil {
		t.Error("second NewHealthCheck on the same registry: got nil error, want a duplicate registration error")
	}
}
