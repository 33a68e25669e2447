package ruleset

import (
	"testing"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// TestNoLocalEndpoints counts what the rules drop for want of a local endpoint, as kube-proxy's
// kubeproxy_sync_proxy_rules_no_local_endpoints_total does: the traces of the policy tests show
// these ports dropped.
func TestNoLocalEndpoints(t *testing.T) {
	etp := func(sp *model.ServicePort) { sp.ExternalTrafficLocal = true }
	itp := func(sp *model.ServicePort) { sp.InternalTrafficLocal = true }
	remote := func(sp *model.ServicePort) { sp.Endpoints = on(otherNode, pod2) }
	none := func(sp *model.ServicePort) { sp.Endpoints = nil }
	clusterIPOnly := func(sp *model.ServicePort) { sp.NodePort, sp.LoadBalancerIPs, sp.ExternalIPs = 0, nil, nil }
	all := func(mods ...func(*model.ServicePort)) func(*model.ServicePort) {
		return func(sp *model.ServicePort) {
			for _, m := range mods {
				m(sp)
			}
		}
	}
	for _, c := range []struct {
		name               string
		mut                func(*model.ServicePort)
		internal, external int
	}{
		{"Cluster policies", func(*model.ServicePort) {}, 0, 0},
		{"eTP Local with a local endpoint", etp, 0, 0},
		{"eTP Local, remote endpoints only", all(etp, remote), 0, 1},
		{"eTP Local on a ClusterIP-only port: no external traffic", all(etp, remote, clusterIPOnly), 0, 0},
		{"iTP Local, remote endpoints only", all(itp, remote), 1, 0},
		{"both Local, remote endpoints only", all(itp, etp, remote), 1, 1},
		{"both Local, no endpoint anywhere: rejected, not counted", all(itp, etp, none), 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			svcs := []*model.Service{webPort(c.mut), {Key: model.ServiceKey{Namespace: "default", Name: "rejected"}}}
			in, ex := policyBuilder(t).NoLocalEndpoints(testNode(), svcs)
			if in != c.internal || ex != c.external {
				t.Errorf("internal %d, external %d; want %d, %d", in, ex, c.internal, c.external)
			}
			v6 := testBuilder(t, func(cfg *Config) {
				cfg.Family, cfg.NodeName = nft.IPv6, thisNode
				cfg.ClusterCIDRs, cfg.ServiceCIDRs = nil, nil
			})
			if in, ex := v6.NoLocalEndpoints(testNode(), svcs); in != 0 || ex != 0 {
				t.Errorf("IPv6 builder on an IPv4 Service: internal %d, external %d; want 0, 0", in, ex)
			}
		})
	}
}
