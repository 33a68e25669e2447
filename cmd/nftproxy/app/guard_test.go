package app

import (
	"net/netip"
	"reflect"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// TestGuardOptions: the reserved ports are the flag's plus the ports nftproxy itself listens on,
// and the block range reaches the model; an empty block range disables blocks; --service-cidr
// reaches the guard in manifest mode only.
func TestGuardOptions(t *testing.T) {
	cidrs := prefixList{netip.MustParsePrefix("10.96.0.0/16")}
	o := Options{ReservedPorts: "22", HealthzAddress: "0.0.0.0:20256", MetricsAddress: "[::1]:20249", BlockRange: "20000-29999", ServiceCIDRs: cidrs}
	g, err := o.guard()
	if err != nil {
		t.Fatal(err)
	}
	if got := model.FormatPortSpans(g.ReservedPorts); got != "22,20256,20249" {
		t.Errorf("reserved ports = %s; want 22,20256,20249", got)
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
