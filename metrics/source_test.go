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

// Manifest mode's file and Node metrics: the bad-file gauge and the last-good counter are
// exported from the start (0), and the Node gauge only where there is a Node to miss.
func TestSourceFileMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewSource(reg, "manifests")
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, SourceBadFiles, SourceLastGoodLoads, NodeObjectMissing); err != nil || n != 3 {
		t.Fatalf("manifest mode exports %d of the file and Node metrics (%v); want 3", n, err)
	}
	m.BadFiles("manifests", 2)
	m.LastGoodLoaded("manifests")
	m.NodeMissing(true)
	for name, c := range map[string]prometheus.Collector{
		"bad files": m.badFiles.WithLabelValues("manifests"), "last good loads": m.lastGood.WithLabelValues("manifests"), "node missing": m.nodeMissing,
	} {
		want := map[string]float64{"bad files": 2, "last good loads": 1, "node missing": 1}[name]
		if got := testutil.ToFloat64(c); got != want {
			t.Errorf("%s = %v; want %v", name, got, want)
		}
	}
	m.NodeMissing(false)
	if got := testutil.ToFloat64(m.nodeMissing); got != 0 {
		t.Errorf("node missing after the Node is back = %v; want 0", got)
	}
	kube := prometheus.NewPedanticRegistry()
	if _, err := NewSource(kube); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(kube, NodeObjectMissing); err != nil || n != 0 {
		t.Errorf("without manifests: %d %s series (%v); want none", n, NodeObjectMissing, err)
	}
}
