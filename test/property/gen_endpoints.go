package property

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// maxSliceEndpoints is the EndpointSlice controller's default endpoints per slice.
const maxSliceEndpoints = 100

// maxPortEndpoints bounds ports × endpoints of one Service. With ClientIP affinity nftproxy adds
// a named set per port and endpoint (as upstream does), and the kernel's cost per set added
// grows with the sets already in the table: a 93-port Service with 380 endpoints (17k sets per
// family) took 2.5 minutes to sync. Larger Services belong in bench/, not in a property test.
const maxPortEndpoints = 2000

// otherNode hosts the endpoints that are not local.
const otherNode = "node-b"

// conditions are the combinations the EndpointSlice controller writes: ready = serving and not
// terminating.
var conditions = []discoveryv1.EndpointConditions{
	{Ready: ref(true), Serving: ref(true), Terminating: ref(false)},
	{Ready: ref(false), Serving: ref(true), Terminating: ref(true)},
	{Ready: ref(false), Serving: ref(false), Terminating: ref(true)},
	{Ready: ref(false), Serving: ref(false), Terminating: ref(false)},
}

// endpoints gives a Service its EndpointSlices: none, a few, or many (split like the controller
// does), one address type per family, with every condition combination, local and remote.
func (g *gen) endpoints(gs *Generated) {
	svc := gs.Service
	var n int
	switch k := g.r.IntN(20); {
	case k < 3:
		n = 0
	case k < 14:
		n = 1 + g.r.IntN(3)
	default:
		n = 4 + g.r.IntN(g.opts.MaxEndpoints-3)
	}
	if n == 0 || len(svc.Spec.Ports) == 0 {
		return
	}
	// ClientIP affinity costs a named set per port and endpoint; keep one Service's share of
	// the batch bounded so a batch syncs in seconds (see maxPortEndpoints).
	n = max(1, min(n, maxPortEndpoints/len(svc.Spec.Ports)))
	ports := g.slicePorts(svc)
	for _, f := range svc.Spec.IPFamilies {
		v6 := isV6(f)
		var eps []discoveryv1.Endpoint
		for k := 0; k < n; k++ {
			ep := discoveryv1.Endpoint{Addresses: []string{g.podIP(v6).String()}, Conditions: conditions[0]}
			if g.chance(0.3) {
				ep.Conditions = conditions[1+g.r.IntN(3)]
			}
			node := otherNode
			if g.chance(0.5) {
				node = g.opts.NodeName
			}
			ep.NodeName = ref(node)
			ep.Zone = ref([]string{"zone-a", "zone-b"}[g.r.IntN(2)])
			eps = append(eps, ep)
		}
		addrType := discoveryv1.AddressTypeIPv4
		if v6 {
			addrType = discoveryv1.AddressTypeIPv6
		}
		for len(eps) > 0 {
			cut := min(len(eps), maxSliceEndpoints)
			if cut > 1 && g.chance(0.2) {
				cut = 1 + g.r.IntN(cut-1) // the controller also leaves slices half full
			}
			gs.Slices = append(gs.Slices, &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: g.sliceName(svc.Name),
					Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
				AddressType: addrType, Endpoints: eps[:cut], Ports: ports,
			})
			eps = eps[cut:]
		}
	}
	gs.Serving = servingPorts(gs, g.opts.NodeName)
}

// servingPorts lists the ports of a Service that have a ready endpoint on node, per family:
// an endpoint of a slice of that family which carries the port.
func servingPorts(gs *Generated, node string) []ServingPort {
	var out []ServingPort
	for _, pn := range portNames(gs) {
		for _, f := range gs.Service.Spec.IPFamilies {
			fam := "4"
			if isV6(f) {
				fam = "6"
			}
			if sliceServes(gs, pn, isV6(f), node) {
				out = append(out, ServingPort{Name: pn, Family: fam})
			}
		}
	}
	return out
}

func sliceServes(gs *Generated, pn model.PortName, v6 bool, node string) bool {
	for _, s := range gs.Slices {
		if (s.AddressType == discoveryv1.AddressTypeIPv6) != v6 {
			continue
		}
		has := false
		for _, p := range s.Ports {
			if p.Protocol != nil && string(*p.Protocol) == string(pn.Protocol) && (pn.Port == model.AllPortsName || (p.Name != nil && *p.Name == pn.Port)) {
				has = true
			}
		}
		if !has {
			continue
		}
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && *ep.Conditions.Ready && ep.NodeName != nil && *ep.NodeName == node {
				return true
			}
		}
	}
	return false
}

// slicePorts are the EndpointSlice ports of a Service: its port names with resolved target
// ports (a named targetPort resolves to some container port).
func (g *gen) slicePorts(svc *corev1.Service) []discoveryv1.EndpointPort {
	var out []discoveryv1.EndpointPort
	for _, p := range svc.Spec.Ports {
		port := p.Port
		if p.TargetPort.IntVal != 0 {
			port = p.TargetPort.IntVal
		} else if p.TargetPort.StrVal != "" {
			port = int32(1 + g.r.IntN(65535))
		}
		out = append(out, discoveryv1.EndpointPort{Name: ref(p.Name), Protocol: ref(p.Protocol), Port: ref(port)})
	}
	return out
}

// sliceName is what the controller's generateName gives: the Service name and a dash, cut to
// 58 characters, then 5 random characters.
func (g *gen) sliceName(svc string) string {
	prefix := svc + "-"
	if len(prefix) > 58 {
		prefix = prefix[:58]
	}
	return prefix + g.label(5, alnum)
}

// podIP is a pod address in the cluster CIDR (198.18.128.0/17, fd00:128::/64).
func (g *gen) podIP(v6 bool) netip.Addr {
	g.ep++
	n := g.ep % 32000
	if v6 {
		return netip.AddrFrom16([16]byte{0xfd, 0, 1, 0x28, 12: 0, 13: 1, 14: byte(n >> 8), 15: byte(n)})
	}
	return netip.AddrFrom4([4]byte{198, 18, byte(128 + n/250), byte(2 + n%250)})
}

// ref returns a pointer to a copy of v (API fields are pointers).
func ref[T any](v T) *T { return &v }
