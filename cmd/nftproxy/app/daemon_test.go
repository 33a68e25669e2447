package app

import (
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nftproxy/nftproxy/proxy/health"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// TestDaemonMetrics builds the daemon's metrics as run does (the bundle, then the gauges that
// follow the model and the health state), in manifest mode and with an API server, and finds
// one family of each collector before any sync, with the source series of the mode; the
// registry passes Prometheus' lint. A collector left out of the bundle fails here, not only
// in the tier that scrapes a running daemon. The names are literals on purpose.
func TestDaemonMetrics(t *testing.T) {
	always := []string{
		"go_goroutines", "process_start_time_seconds", "kubernetes_build_info", // component
		"nftproxy_sync_failures_total", "nftproxy_invalid_services_total", // proxy
		"nftproxy_service_changes_pending", "kubeproxy_sync_proxy_rules_service_changes_total", // the model's
		"nftproxy_nodeport_allocator_available_ports",
		"nftproxy_conntrack_deleted_entries_total",
		"nftproxy_healthcheck_node_ports",
		"nftproxy_drift_suspected_total",
		"nftproxy_ephemeral_overlap_ports",
		"nftproxy_node_eligible", // the health state's
	}
	for _, c := range []struct {
		name, manifests, source string
	}{
		{"manifests", "/etc/nftproxy/manifests", "manifests"},
		{"API server", "", "apiserver"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := &Options{Manifests: c.manifests}
			m, err := newDaemonMetrics(o, nil)
			if err != nil {
				t.Fatal(err)
			}
			tracker := newTracker(o, model.GuardConfig{}, logr.Discard(), m.proxy, nil, func() {})
			if err := m.followModel(tracker, nil); err != nil {
				t.Fatal(err)
			}
			if err := m.followHealth(&health.State{}, c.manifests != ""); err != nil {
				t.Fatal(err)
			}
			fams, err := m.reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]bool{}
			var up []string // the sources of nftproxy_source_up
			for _, f := range fams {
				got[f.GetName()] = true
				if f.GetName() != "nftproxy_source_up" {
					continue
				}
				for _, s := range f.GetMetric() {
					for _, l := range s.GetLabel() {
						up = append(up, l.GetName()+"="+l.GetValue())
					}
				}
			}
			for _, name := range always {
				if !got[name] {
					t.Errorf("no %s on the daemon's registry", name)
				}
			}
			if want := "source=" + c.source; len(up) != 1 || up[0] != want {
				t.Errorf("nftproxy_source_up series %v; want one, %s", up, want)
			}
			if lint, err := testutil.GatherAndLint(m.reg); err != nil || len(lint) > 0 {
				t.Errorf("lint: %v %v", lint, err)
			}
		})
	}
}
