package metrics

import (
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestSourceMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewSource(reg, "manifests")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name         string
		err          error
		up, failures float64
	}{
		{"start", nil, 1, 0},
		{"directory gone", errors.New("no such directory"), 0, 1},
		{"back", nil, 1, 1},
		{"gone again", errors.New("no such directory"), 0, 2},
	}
	for i, s := range steps {
		if i > 0 {
			m.Failing("manifests", s.err)
		}
		up := testutil.ToFloat64(m.up.WithLabelValues("manifests"))
		failures := testutil.ToFloat64(m.failures.WithLabelValues("manifests"))
		if up != s.up || failures != s.failures {
			t.Errorf("%s: up %v, failures %v; want %v, %v", s.name, up, failures, s.up, s.failures)
		}
	}
	if _, err := NewSource(reg, "manifests"); err == nil {
		t.Error("registering twice succeeded; want an error")
	}
}
