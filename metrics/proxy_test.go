package metrics

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
)

func TestProxyMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewProxy(reg, []string{"range-end-before-start"})
	if err != nil {
		t.Fatal(err)
	}
	m.Synced(true, 2*time.Second, reconciler.Result{Full: true, Ops: 40, Repairs: 3, Stats: nft.Stats{Bytes: 4096},
		Objects: map[nft.Family]reconciler.Counts{nft.IPv4: {Chains: 5, Rules: 9, Sets: 2, Elements: 7}}}, nil)
	m.Synced(false, 10*time.Millisecond, reconciler.Result{}, errors.New("boom"))
	m.Programmed(150 * time.Millisecond)
	m.Rejected("range-end-before-start")

	for name, want := range map[string]float64{
		SyncFailures: 1, KubeProxySyncFailures: 1, SyncOps: 40, SyncBytes: 4096, DriftRepairs: 3,
	} {
		var c prometheus.Collector
		switch name {
		case SyncFailures:
			c = m.failures
		case KubeProxySyncFailures:
			c = m.kpFailures.WithLabelValues("IPv6")
		case SyncOps:
			c = m.ops
		case SyncBytes:
			c = m.bytes
		case DriftRepairs:
			c = m.repairs
		}
		if got := testutil.ToFloat64(c); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if got := testutil.ToFloat64(m.objects.WithLabelValues("IPv4", "elements")); got != 7 {
		t.Errorf("elements gauge = %v, want 7", got)
	}
	if got := testutil.ToFloat64(m.invalid.WithLabelValues("range-end-before-start")); got != 1 {
		t.Errorf("invalid services = %v, want 1", got)
	}
	n, err := testutil.GatherAndCount(reg, SyncDuration, KubeProxySync, KubeProxyProgramming, NetworkProgramming)
	if err != nil || n != 7 {
		t.Errorf("gathered %d series (err %v), want 7 (2 kinds, 2 families of each kube-proxy histogram, 1 plain)", n, err)
	}
	m.Synced(false, time.Millisecond, reconciler.Result{CleanupFailed: []nft.Family{nft.IPv6}}, nil)
	for _, c := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{CleanupFailures + " IPv6", m.cleanupFailures.WithLabelValues("IPv6"), 1},
		{KubeProxyCleanupFail + " IPv6", m.kpCleanupFailures.WithLabelValues("IPv6"), 1},
		{KubeProxyCleanupFail + " IPv4", m.kpCleanupFailures.WithLabelValues("IPv4"), 0},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("after a sync whose IPv6 cleanup failed: %s = %v, want %v", c.name, got, c.want)
		}
	}
	if lint, err := testutil.GatherAndLint(reg); err != nil || len(lint) > 0 {
		t.Errorf("metric lint problems: %v %v", lint, err)
	}
	m.Served("/healthz", 200)
	m.Served("/healthz", 503)
	m.Served("/livez", 200)
	m.Changed(3)
	pending := 7
	if err := m.WatchPending(func() int { return pending }); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{"healthz 200", m.healthz.WithLabelValues("200"), 1},
		{"healthz 503", m.healthz.WithLabelValues("503"), 1},
		{"livez 200", m.livez.WithLabelValues("200"), 1},
		{"changes", m.changes.WithLabelValues(), 3},
	} {
		if got := testutil.ToFloat64(c.c); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if n, err := testutil.GatherAndCount(reg, ServiceChangesPending); err != nil || n != 1 {
		t.Errorf("pending gauge: %d series (err %v), want 1", n, err)
	}
	if _, err := NewProxy(reg, nil); err == nil {
		t.Error("registering twice on one registry succeeded")
	}
}
