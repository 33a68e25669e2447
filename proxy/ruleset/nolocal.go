package ruleset

import "github.com/nftproxy/nftproxy/proxy/model"

// NoLocalEndpoints counts, in the builder's family, the Service ports whose Local traffic
// policy leaves them without an endpoint on this node while the cluster has some: their
// ClusterIP traffic (internalTrafficPolicy Local: internal) or their external traffic
// (externalTrafficPolicy Local on a port reachable from outside: external) is dropped here.
// kube-proxy reports the same per family as kubeproxy_sync_proxy_rules_no_local_endpoints_total,
// from the same decision its rules make; ports without any endpoint are rejected, not counted.
func (b *Builder) NoLocalEndpoints(node *model.Node, services []*model.Service) (internal, external int) {
	for _, s := range services {
		if s == nil {
			continue
		}
		for i := range s.Ports {
			sp := &s.Ports[i]
			if !sp.InternalTrafficLocal && !sp.ExternalTrafficLocal {
				continue
			}
			p, ok := b.planPort(node, sp)
			if !ok || !p.cat.HasAny || p.local {
				continue
			}
			if sp.InternalTrafficLocal {
				internal++
			}
			if sp.ExternalTrafficLocal && p.sp.ExternallyAccessible() {
				external++
			}
		}
	}
	return internal, external
}
