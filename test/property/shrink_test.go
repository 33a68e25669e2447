package property

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// shrink makes a failing Service as small as it can while it still fails on its own: fewer
// ports, endpoints, slices and families, and none of the optional fields that do not matter.
// Every candidate is checked against the API's validation first, so the result is still input
// the API server accepts. fails runs the property on a one-Service batch.
func shrink(gs *Generated, fails func(*Generated) bool) *Generated {
	cur := clone(gs)
	for round := 0; round < 100; round++ {
		progressed := false
		for _, step := range shrinkSteps(cur) {
			next := clone(cur)
			if !step(next) {
				continue
			}
			next.Serving = servingPorts(next, gs.nodeName)
			if validateGenerated(next) != nil || !fails(next) {
				continue
			}
			cur, progressed = next, true
			break
		}
		if !progressed {
			break
		}
	}
	return cur
}

func clone(gs *Generated) *Generated {
	out := &Generated{Service: gs.Service.DeepCopy(), Shapes: gs.Shapes, Expect: gs.Expect, Serving: slices.Clone(gs.Serving), nodeName: gs.nodeName}
	for _, s := range gs.Slices {
		out.Slices = append(out.Slices, s.DeepCopy())
	}
	return out
}

// shrinkSteps lists the simplifications to try, each returning false when it does not apply.
func shrinkSteps(gs *Generated) []func(*Generated) bool {
	steps := []func(*Generated) bool{
		func(g *Generated) bool { // no endpoints at all
			if len(g.Slices) == 0 {
				return false
			}
			g.Slices, g.Serving = nil, nil
			return true
		},
		func(g *Generated) bool { // one slice
			if len(g.Slices) < 2 {
				return false
			}
			g.Slices = g.Slices[:1]
			return true
		},
		func(g *Generated) bool { // one endpoint per slice
			changed := false
			for _, s := range g.Slices {
				if len(s.Endpoints) > 1 {
					s.Endpoints, changed = s.Endpoints[:1], true
				}
			}
			return changed
		},
		func(g *Generated) bool { // one family
			spec := &g.Service.Spec
			if len(spec.IPFamilies) < 2 {
				return false
			}
			keep := spec.IPFamilies[0]
			single := corev1.IPFamilyPolicySingleStack
			spec.IPFamilies, spec.ClusterIPs, spec.IPFamilyPolicy = spec.IPFamilies[:1], spec.ClusterIPs[:1], &single
			g.Slices = slices.DeleteFunc(g.Slices, func(s *discoveryv1.EndpointSlice) bool {
				return (s.AddressType == discoveryv1.AddressTypeIPv6) != isV6(keep)
			})
			return true
		},
		func(g *Generated) bool { // no external IPs
			had := len(g.Service.Spec.ExternalIPs) > 0
			g.Service.Spec.ExternalIPs = nil
			if had && !externallyAccessible(g.Service) {
				g.Service.Spec.ExternalTrafficPolicy = ""
			}
			return had
		},
		func(g *Generated) bool { // fewer source ranges
			n := len(g.Service.Spec.LoadBalancerSourceRanges)
			if n == 0 {
				return false
			}
			g.Service.Spec.LoadBalancerSourceRanges = g.Service.Spec.LoadBalancerSourceRanges[:n-1]
			return true
		},
		func(g *Generated) bool { // no affinity, no trafficDistribution
			spec := &g.Service.Spec
			had := spec.SessionAffinityConfig != nil || spec.TrafficDistribution != nil
			spec.SessionAffinity, spec.SessionAffinityConfig, spec.TrafficDistribution = corev1.ServiceAffinityNone, nil, nil
			return had
		},
		func(g *Generated) bool { // traffic policies Cluster
			spec := &g.Service.Spec
			had := spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal ||
				(spec.InternalTrafficPolicy != nil && *spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal)
			if spec.ExternalTrafficPolicy != "" {
				spec.ExternalTrafficPolicy, spec.HealthCheckNodePort = corev1.ServiceExternalTrafficPolicyCluster, 0
			}
			itp := corev1.ServiceInternalTrafficPolicyCluster
			spec.InternalTrafficPolicy = &itp
			return had
		},
		func(g *Generated) bool { // no free-text labels and annotations
			_, had := g.Service.Annotations["example.com/owner"]
			had = had || g.Service.Labels != nil
			g.Service.Labels = nil
			delete(g.Service.Annotations, "example.com/owner")
			return had
		},
		func(g *Generated) bool { // LoadBalancer -> NodePort -> ClusterIP
			spec := &g.Service.Spec
			switch spec.Type {
			case corev1.ServiceTypeLoadBalancer:
				spec.Type, spec.AllocateLoadBalancerNodePorts, spec.HealthCheckNodePort = corev1.ServiceTypeNodePort, nil, 0
				spec.LoadBalancerSourceRanges = nil
				g.Service.Status = corev1.ServiceStatus{}
				for i := range spec.Ports {
					if spec.Ports[i].NodePort == 0 {
						spec.Ports[i].NodePort = int32(nodePortFirst + i)
					}
				}
				return true
			case corev1.ServiceTypeNodePort:
				spec.Type = corev1.ServiceTypeClusterIP
				for i := range spec.Ports {
					spec.Ports[i].NodePort = 0
				}
				if !externallyAccessible(g.Service) {
					spec.ExternalTrafficPolicy = ""
				}
				return true
			}
			return false
		},
	}
	for i := range gs.Service.Spec.Ports {
		steps = append(steps, func(g *Generated) bool { return dropPort(g, i) })
	}
	return steps
}

// dropPort removes port i from the Service, its slices and its annotation entries.
func dropPort(g *Generated, i int) bool {
	spec := &g.Service.Spec
	if len(spec.Ports) < 2 || i >= len(spec.Ports) {
		return false
	}
	name := spec.Ports[i].Name
	spec.Ports = slices.Delete(spec.Ports, i, i+1)
	for _, s := range g.Slices {
		s.Ports = slices.DeleteFunc(s.Ports, func(p discoveryv1.EndpointPort) bool { return p.Name != nil && *p.Name == name })
	}
	for _, key := range []string{annotation.PortRangesKey, annotation.NodePortRangesKey} {
		v, ok := g.Service.Annotations[key]
		if !ok {
			continue
		}
		var keep []string
		for _, e := range strings.Split(v, ",") {
			if n, _, _ := strings.Cut(e, "="); strings.TrimSpace(n) != name {
				keep = append(keep, e)
			}
		}
		if len(keep) == 0 {
			delete(g.Service.Annotations, key)
		} else {
			g.Service.Annotations[key] = strings.Join(keep, ",")
		}
	}
	return true
}
