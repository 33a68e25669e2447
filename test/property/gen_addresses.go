package property

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// Special addresses a Service may name (the API server accepts them as load-balancer ingress
// IPs, and as cluster IPs from a ServiceCIDR that holds them or a hand-written manifest), and
// that no Service may take (model.SpecialAddress).
var (
	specialV4 = []string{"0.0.0.0", "127.0.0.1", "127.0.0.53", "169.254.169.254", "169.254.1.1", "224.0.0.1", "239.255.255.250", "255.255.255.255"}
	specialV6 = []string{"::", "::1", "fe80::1", "ff02::1", "fd00:ec2::254"}
)

// specialAddressService: a single-port Service with one special address, as a cluster IP or as
// a load-balancer ingress IP; it must be rejected with SpecialAddress. False when every special
// cluster IP of the drawn family is taken in this batch (cluster IPs are unique).
func (g *gen) specialAddressService(gs *Generated, long bool) bool {
	svc := gs.Service
	g.families(svc, true)
	i := g.r.IntN(len(svc.Spec.IPFamilies))
	pool := specialV4
	if isV6(svc.Spec.IPFamilies[i]) {
		pool = specialV6
	}
	a := pool[g.r.IntN(len(pool))]
	asClusterIP := g.chance(0.5)
	if asClusterIP && g.usedSpecial[a] {
		return false // before any port is set: the caller builds a plain Service instead
	}
	svc.Spec.Ports = []corev1.ServicePort{g.singlePort(map[string]bool{}, portUse{}, portOpts{long: long})}
	if asClusterIP {
		g.usedSpecial[a] = true
		svc.Spec.Type = corev1.ServiceTypeClusterIP
		svc.Spec.ClusterIPs[i] = a
		svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
		gs.Expect = Expect{Outcome: Rejected, Reason: model.ReasonSpecialAddress, Why: "special cluster IP " + a}
	} else {
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
		alloc := false
		svc.Spec.AllocateLoadBalancerNodePorts = &alloc
		svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: a}}
		gs.Expect = Expect{Outcome: Rejected, Reason: model.ReasonSpecialAddress, Why: "special load-balancer ingress IP " + a}
	}
	gs.Shapes[ShapeSpecialAddress] = true
	g.policies(gs)
	return true
}

// kernelAddressService: an all-ports or port-range ClusterIP Service whose cluster IP is an
// address the node's kernel holds but its Node object does not list (Options.LocalIPs: a pod
// bridge's gateway); it must be rejected with NodeAddressRange. Each such address serves one
// Service per batch; false when none is left.
func (g *gen) kernelAddressService(gs *Generated, long bool) bool {
	var a netip.Addr
	for _, l := range g.opts.LocalIPs {
		if !g.usedLocal[l] {
			a = l
			break
		}
	}
	if !a.IsValid() {
		return false
	}
	g.usedLocal[a] = true
	svc := gs.Service
	gs.Shapes[ShapeKernelAddress] = true
	fam, policy := corev1.IPv4Protocol, corev1.IPFamilyPolicySingleStack
	if a.Is6() {
		fam = corev1.IPv6Protocol
	}
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = []corev1.IPFamily{fam}, &policy
	svc.Spec.ClusterIPs = []string{a.String()}
	svc.Spec.ClusterIP = a.String()
	name := g.portName(long, map[string]bool{})
	if g.chance(0.5) {
		svc.Spec.Ports = []corev1.ServicePort{{Name: name, Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)}}
		svc.Annotations[annotation.AllPortsKey] = "true"
		gs.Expect = Expect{Outcome: Rejected, Reason: model.ReasonNodeAddressRange, Why: "all-ports on kernel-held address " + a.String()}
	} else {
		svc.Spec.Ports = []corev1.ServicePort{{Name: name, Protocol: corev1.ProtocolTCP, Port: 1, TargetPort: intstr.FromInt32(1)}}
		svc.Annotations[annotation.PortRangesKey] = fmt.Sprintf("%s=1-1024", name)
		gs.Expect = Expect{Outcome: Rejected, Reason: model.ReasonNodeAddressRange, Why: "port range 1-1024 on kernel-held address " + a.String()}
	}
	g.policies(gs)
	return true
}
