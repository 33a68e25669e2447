package property

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// keepPorts sets every port's targetPort to its port (ranges and all-ports keep the port).
func keepPorts(svc *corev1.Service) {
	for i := range svc.Spec.Ports {
		svc.Spec.Ports[i].TargetPort = intstr.FromInt32(svc.Spec.Ports[i].Port)
	}
}

// allPortsService: a ClusterIP or LoadBalancer Service with nftproxy.io/all-ports.
func (g *gen) allPortsService(gs *Generated, long bool) {
	svc := gs.Service
	gs.Shapes[ShapeAllPorts] = true
	svc.Spec.Type = corev1.ServiceTypeClusterIP
	if g.chance(0.4) {
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	}
	g.families(svc, true)
	n := 1 + g.r.IntN(3)
	use, names := portUse{}, map[string]bool{}
	for k := 0; k < n; k++ {
		svc.Spec.Ports = append(svc.Spec.Ports, g.singlePort(names, use, portOpts{named: n > 1, long: long}))
	}
	keepPorts(svc)
	svc.Annotations[annotation.AllPortsKey] = "true"
	g.nodePortsFor(gs)
	g.external(gs, false)
	g.policies(gs)
}

// clashService: a NodePort Service whose node port is an older programmed Service's; it must
// be rejected with ServiceConflict. False when no older node port exists yet.
func (g *gen) clashService(gs *Generated, long bool) bool {
	if len(g.clashable) == 0 {
		return false
	}
	c := g.clashable[g.r.IntN(len(g.clashable))]
	svc := gs.Service
	gs.Shapes[ShapeNodePortClash] = true
	gs.Expect = Expect{Outcome: Rejected, Reason: model.ReasonServiceConflict,
		Why: fmt.Sprintf("node port %s/%d is older Service %s's", c.proto, c.port, c.owner)}
	svc.Spec.Type = corev1.ServiceTypeNodePort
	g.families(svc, true)
	sp := g.singlePort(map[string]bool{}, portUse{}, portOpts{long: long, proto: c.proto})
	sp.NodePort = c.port
	svc.Spec.Ports = []corev1.ServicePort{sp}
	g.policies(gs)
	return true
}

// blockService: a NodePort range Service with an identity node-port block (16000-16999), or, for
// ShapeNodePortBlockReserved, a block over the kubelet's port 10250.
func (g *gen) blockService(gs *Generated, shape Shape, long bool) {
	svc := gs.Service
	width := 2 + g.r.IntN(19)
	start := int(g.block)
	if shape == ShapeNodePortBlockReserved {
		start, width = 10240, 20
	} else if start+width-1 > blockLast {
		g.plainService(gs, long, "")
		return
	}
	gs.Shapes[shape] = true
	svc.Spec.Type = corev1.ServiceTypeNodePort
	g.families(svc, true)
	proto := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}[g.r.IntN(2)]
	name := g.portName(long, map[string]bool{})
	svc.Spec.Ports = []corev1.ServicePort{{Name: name, Protocol: proto, Port: int32(start), TargetPort: intstr.FromInt32(int32(start))}}
	entry := fmt.Sprintf("%s=%d-%d", name, start, start+width-1)
	svc.Annotations[annotation.PortRangesKey] = entry
	svc.Annotations[annotation.NodePortRangesKey] = entry
	if shape == ShapeNodePortBlockReserved {
		gs.Expect = Expect{Outcome: Rejected, Why: "a node-port block over reserved port 10250"}
	} else {
		g.block += uint16(width)
		gs.Expect = Expect{Outcome: Either, Why: "a user-written node-port block; the node may refuse blocks outside its block range"}
	}
	g.nodePortsFor(gs)
	g.policies(gs)
}

// nodeAddressService: a Service on the node's own addresses, through a LoadBalancer ingress IP
// (bare-metal controllers publish node IPs) or an external IP.
func (g *gen) nodeAddressService(gs *Generated, shape Shape, long bool) {
	svc := gs.Service
	gs.Shapes[shape] = true
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	g.families(svc, true)
	use, names := portUse{}, map[string]bool{}
	viaExternalIP := false
	switch shape {
	case ShapeNodeAddressPort:
		n := 1 + g.r.IntN(3)
		for k := 0; k < n; k++ {
			svc.Spec.Ports = append(svc.Spec.Ports, g.singlePort(names, use, portOpts{named: n > 1, long: long, onNode: true}))
		}
		gs.Expect = Expect{Outcome: Either, Why: "single unreserved ports on a node address (ServiceLB style)"}
	case ShapeNodeAddressReservedPort:
		port := []int32{22, 10250}[g.r.IntN(2)]
		svc.Spec.Ports = []corev1.ServicePort{{Name: g.portName(long, names), Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromInt32(port)}}
		gs.Expect = Expect{Outcome: Rejected, Why: fmt.Sprintf("reserved port %d on a node address", port)}
	case ShapeNodeAddressAllPorts:
		svc.Spec.Ports = []corev1.ServicePort{
			{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)},
			{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(53)},
		}
		svc.Annotations[annotation.AllPortsKey] = "true"
		gs.Expect = Expect{Outcome: Rejected, Why: "all-ports on a node address"}
	case ShapeNodeAddressRange:
		start, end := 10000, 10999
		if g.chance(0.5) {
			start, end = 1, 65535
		}
		name := g.portName(long, names)
		svc.Spec.Ports = []corev1.ServicePort{{Name: name, Protocol: corev1.ProtocolTCP, Port: int32(start), TargetPort: intstr.FromInt32(int32(start))}}
		svc.Annotations[annotation.PortRangesKey] = fmt.Sprintf("%s=%d-%d", name, start, end)
		viaExternalIP = g.chance(0.5)
		gs.Expect = Expect{Outcome: Rejected, Why: fmt.Sprintf("port range %d-%d on a node address", start, end)}
	}
	if viaExternalIP {
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	}
	for _, f := range svc.Spec.IPFamilies {
		a, ok := g.nodeIP(isV6(f))
		if !ok {
			continue
		}
		if viaExternalIP {
			svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, a.String())
		} else {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: a.String()})
		}
	}
	if shape != ShapeNodeAddressAllPorts {
		g.nodePortsFor(gs)
	} else {
		alloc := false
		svc.Spec.AllocateLoadBalancerNodePorts = &alloc
	}
	g.policies(gs)
}
