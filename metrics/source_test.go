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
		up := sourceUp(t, reg, "manifests")
		failures := testutil.ToFloat64(m.failures.WithLabelValues("manifests"))
		if up != s.up || failures != s.failures {
			t.Errorf("%s: up %v, failures %v; want %v, %v", s.name, up, failures, s.up, s.failures)
		}
	}
	apiUp := false
	m.Follow("apiserver", func() bool { return apiUp })
	if got := sourceUp(t, reg, "apiserver"); got != 0 {
		t.Errorf("followed source down: up %v, want 0", got)
	}
	apiUp = true
	if got := sourceUp(t, reg, "apiserver"); got != 1 {
		t.Errorf("followed source up: up %v, want 1", got)
	}
	if _, err := NewSource(reg, "manifests"); err == nil {
		t.Error("registering twice succeeded; want an error")
	}
}

// sourceUp gathers reg and returns nftproxy_source_up{source}, -1 when absent.
func sourceUp(t *testing.T, reg prometheus.Gatherer, source string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != SourceUp {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}
