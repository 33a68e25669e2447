package app

import (
	"flag"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// TestGuardOptions: the reserved ports are the flag's plus the ports nftproxy itself listens on,
// and the block range reaches the model; an empty block range disables blocks; --service-cidr
// reaches the guard in manifest mode only.
func TestGuardOptions(t *testing.T) {
	cidrs := prefixList{netip.MustParsePrefix("10.96.0.0/16")}
	o := Options{ReservedPorts: "22", HealthzAddress: "0.0.0.0:20256", MetricsAddress: "[::1]:20249", HealthCheckPort: 20253, BlockRange: "20000-29999", ServiceCIDRs: cidrs}
	g, err := o.guard()
	if err != nil {
		t.Fatal(err)
	}
	if got := model.FormatPortSpans(g.ReservedPorts); got != "22,20256,20249,20253" {
		t.Errorf("reserved ports = %s; want 22,20256,20249,20253", got)
	}
	if g.BlockRange != (model.PortSpan{First: 20000, Last: 29999}) {
		t.Errorf("block range = %v", g.BlockRange)
	}
	if g.ServiceCIDRs != nil {
		t.Errorf("Kubernetes mode: service CIDRs %v reach the guard; want none (a cluster may have ServiceCIDRs the flag does not list)", g.ServiceCIDRs)
	}
	o = Options{Manifests: "m", ServiceCIDRs: cidrs}
	if g, err = o.guard(); err != nil || !reflect.DeepEqual(g.ServiceCIDRs, []netip.Prefix(cidrs)) {
		t.Errorf("manifest mode: service CIDRs %v, %v; want %v", g.ServiceCIDRs, err, cidrs)
	}
	o = Options{ReservedPorts: model.DefaultReservedPorts}
	if g, err = o.guard(); err != nil || !g.BlockRange.IsZero() || len(g.ReservedPorts) != 4 {
		t.Errorf("defaults without listeners or blocks: %+v, %v", g, err)
	}
}

// TestHealthCheckPortOption: --health-check-port reaches the builders (the redirect's port), and
// a port out of range or shared with the healthz or metrics address is refused naming the flag.
func TestHealthCheckPortOption(t *testing.T) {
	for _, c := range []struct {
		port    int
		healthz string
		bad     bool
	}{
		{DefaultHealthCheckPort, "0.0.0.0:10256", false},
		{0, "0.0.0.0:10256", false}, // not served
		{10256, "0.0.0.0:10256", true},
		{-1, "", true},
		{65536, "", true},
	} {
		o := &Options{}
		o.register(flag.NewFlagSet("run", flag.ContinueOnError), runFlags)
		o.HealthCheckPort, o.HealthzAddress = c.port, c.healthz
		bs, err := o.builders()
		if c.bad {
			if err == nil || !strings.Contains(err.Error(), "--health-check-port") {
				t.Errorf("--health-check-port %d, healthz %q: got %v, want an error naming the flag", c.port, c.healthz, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("--health-check-port %d: %v", c.port, err)
		}
		rs := bs[0].Ruleset(nil, nil)
		hasSet := false
		for _, s := range rs.Sets {
			hasSet = hasSet || s.Name == "health-check-nodeports"
		}
		if hasSet != (c.port != 0) {
			t.Errorf("--health-check-port %d: health-check set in the ruleset %v, want %v", c.port, hasSet, c.port != 0)
		}
	}
}
