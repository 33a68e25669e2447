package property

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// portUse tracks the port intervals a Service already uses per protocol, so generated ports
// never overlap within one Service (that is a PortOverlap rejection, not an odd shape).
type portUse map[corev1.Protocol][][2]int

func (u portUse) free(p corev1.Protocol, lo, hi int) bool {
	for _, s := range u[p] {
		if lo <= s[1] && s[0] <= hi {
			return false
		}
	}
	return true
}

func (u portUse) take(p corev1.Protocol, lo, hi int) { u[p] = append(u[p], [2]int{lo, hi}) }

func (g *gen) protocol() corev1.Protocol {
	switch n := g.r.IntN(20); {
	case n < 10:
		return corev1.ProtocolTCP
	case n < 17:
		return corev1.ProtocolUDP
	}
	return corev1.ProtocolSCTP
}

// avoid says whether a single port must stay off a node address (reserved, node-port range,
// identity blocks), for Services whose addresses are the node's.
func avoid(p int) bool {
	for _, r := range ReservedPorts {
		if int(r) == p {
			return true
		}
	}
	return (p >= nodePortFirst && p <= nodePortLast) || (p >= blockFirst && p <= blockLast)
}

// portOpts shape one drawn port.
type portOpts struct {
	named  bool            // a name is required (the Service has several ports)
	long   bool            // the name may be long (ShapeLongNames)
	proto  corev1.Protocol // "" draws one
	onNode bool            // the port lives on a node address: keep it off reserved and node ports
}

// singlePort draws one port with a number free for its protocol.
func (g *gen) singlePort(names map[string]bool, use portUse, o portOpts) corev1.ServicePort {
	proto := o.proto
	if proto == "" {
		proto = g.protocol()
	}
	var port int
	for {
		port = 1 + g.r.IntN(65535)
		if use.free(proto, port, port) && !(o.onNode && avoid(port)) {
			break
		}
	}
	use.take(proto, port, port)
	sp := corev1.ServicePort{Protocol: proto, Port: int32(port)}
	if o.named || g.chance(0.5) {
		sp.Name = g.portName(o.long, names)
	}
	switch n := g.r.IntN(10); {
	case n < 4:
		sp.TargetPort = intstr.FromInt32(int32(1 + g.r.IntN(65535)))
	case n < 7:
		sp.TargetPort = intstr.FromInt32(int32(port))
	default:
		sp.TargetPort = intstr.FromString(g.label(1+g.r.IntN(maxPortName), lower))
	}
	return sp
}

// rangePort draws a named port that starts a range of the given width (end = start+width-1),
// or ending at 65535 when toEnd; it returns the port and its port-ranges entry.
func (g *gen) rangePort(names map[string]bool, use portUse, long bool, width int, toEnd bool, proto corev1.Protocol) (corev1.ServicePort, string, bool) {
	if proto == "" {
		proto = g.protocol()
	}
	for try := 0; try < 50; try++ {
		start := 1 + g.r.IntN(65536-width)
		if toEnd {
			start = 65536 - width
		}
		end := start + width - 1
		if !use.free(proto, start, end) {
			continue
		}
		use.take(proto, start, end)
		name := g.portName(long, names)
		sp := corev1.ServicePort{Name: name, Protocol: proto, Port: int32(start), TargetPort: intstr.FromInt32(int32(start))}
		entry := fmt.Sprintf("%s=%d-%d", name, start, end)
		if g.chance(0.2) {
			entry = fmt.Sprintf(" %s = %d - %d ", name, start, end) // whitespace is documented as ignored
		}
		return sp, entry, true
	}
	return corev1.ServicePort{}, "", false
}

// makeRange adds a range port of the given shape to a plain Service.
func (g *gen) makeRange(gs *Generated, use portUse, shape Shape, long bool) {
	svc := gs.Service
	names := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		names[p.Name] = true
	}
	width, toEnd := 2+g.r.IntN(199), false
	switch shape {
	case ShapeOnePortRange:
		width = 1
	case ShapeRangeTo65535:
		width, toEnd = 2+g.r.IntN(999), true
	}
	sp, entry, ok := g.rangePort(names, use, long, width, toEnd, "")
	if !ok {
		return
	}
	gs.Shapes[shape] = true
	if width == 1 {
		gs.Shapes[ShapeOnePortRange] = true
	}
	// A Service with more than one port needs every port named.
	for i := range svc.Spec.Ports {
		if svc.Spec.Ports[i].Name == "" {
			svc.Spec.Ports[i].Name = g.portName(false, names)
		}
	}
	svc.Spec.Ports = append(svc.Spec.Ports, sp)
	addEntry(svc, annotation.PortRangesKey, entry)
}

func addEntry(svc *corev1.Service, key, entry string) {
	if v := svc.Annotations[key]; v != "" {
		entry = v + "," + entry
	}
	svc.Annotations[key] = entry
}

// families sets spec.ipFamilies, ipFamilyPolicy and the cluster IPs: single-stack IPv4 or IPv6,
// or dual-stack in either order (only where the node has both families).
func (g *gen) families(svc *corev1.Service, allowDual bool) {
	_, has4 := g.nodeIP(false)
	_, has6 := g.nodeIP(true)
	fams := []corev1.IPFamily{corev1.IPv4Protocol}
	switch n := g.r.IntN(10); {
	case n < 3 && has6:
		fams = []corev1.IPFamily{corev1.IPv6Protocol}
	case n < 6 && allowDual && has4 && has6:
		fams = []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}
	case n < 8 && allowDual && has4 && has6:
		fams = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	}
	policy := corev1.IPFamilyPolicySingleStack
	if len(fams) == 2 {
		policy = []corev1.IPFamilyPolicy{corev1.IPFamilyPolicyPreferDualStack, corev1.IPFamilyPolicyRequireDualStack}[g.r.IntN(2)]
	} else if g.chance(0.2) {
		policy = corev1.IPFamilyPolicyPreferDualStack // the cluster may be single-stack
	}
	svc.Spec.IPFamilies, svc.Spec.IPFamilyPolicy = fams, &policy
	svc.Spec.ClusterIPs = nil
	for _, f := range fams {
		svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, g.clusterIP(f == corev1.IPv6Protocol).String())
	}
	svc.Spec.ClusterIP = svc.Spec.ClusterIPs[0]
}

// clusterIP hands out the next free address of the service CIDR (198.19.0.0/18, fd00:19::/112).
func (g *gen) clusterIP(v6 bool) netip.Addr {
	for {
		var a netip.Addr
		if v6 {
			g.cip6 += 1 + uint32(g.r.IntN(3))
			a = netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x19, 10: 0, 11: 0, 12: 0, 13: 0, 14: byte(g.cip6 >> 8), 15: byte(g.cip6)})
			if g.cip6 > 0xfffe {
				panic("property generator: IPv6 service CIDR exhausted; generate fewer Services")
			}
		} else {
			g.cip4 += 1 + uint32(g.r.IntN(3))
			if g.cip4 > 16382 {
				panic("property generator: IPv4 service CIDR exhausted; generate fewer Services")
			}
			a = netip.AddrFrom4([4]byte{198, 19, byte(g.cip4 >> 8), byte(g.cip4)})
		}
		if !g.reserved[a] {
			return a
		}
	}
}

// poolAddr returns address n of a pool: v4 198.19.<base+n/254>.<1+n%254>, v6 fd00:19:<base>::n.
func poolAddr(base byte, n uint32, v6 bool) netip.Addr {
	if v6 {
		return netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x19, 0, base, 12: byte(n >> 24), 13: byte(n >> 16), 14: byte(n >> 8), 15: byte(n + 1)})
	}
	return netip.AddrFrom4([4]byte{198, 19, base + byte(n/254), byte(1 + n%254)})
}

func (g *gen) lbIP(v6 bool) netip.Addr {
	g.lb++
	return poolAddr(100, g.lb%1000, v6) // 198.19.100.0/22, fd00:19:100::/112
}

func (g *gen) externalIP(v6 bool) netip.Addr {
	g.ext++
	return poolAddr(200, g.ext%1000, v6) // 198.19.200.0/22, fd00:19:200::/112
}

func isV6(f corev1.IPFamily) bool { return f == corev1.IPv6Protocol }

// sourceRange is a CIDR inside the lab's address space (198.18.0.0/15 or fd00::/8).
func (g *gen) sourceRange(v6 bool) string {
	if v6 {
		return fmt.Sprintf("fd00:%x::/%d", g.r.IntN(0x10000), 32+16*g.r.IntN(3))
	}
	if g.chance(0.3) {
		return fmt.Sprintf("198.%d.0.0/16", 18+g.r.IntN(2))
	}
	return fmt.Sprintf("198.%d.%d.0/24", 18+g.r.IntN(2), g.r.IntN(256))
}

// external sets what makes a Service reachable from outside: LoadBalancer status and source
// ranges, external IPs.
func (g *gen) external(gs *Generated, spacedRanges bool) {
	svc := gs.Service
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, f := range svc.Spec.IPFamilies {
			ing := corev1.LoadBalancerIngress{IP: g.lbIP(isV6(f)).String()}
			if g.chance(0.2) {
				m := corev1.LoadBalancerIPModeVIP
				ing.IPMode = &m
			}
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, ing)
		}
		if g.chance(0.1) {
			svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{Hostname: "lb.example.com"})
		}
		if spacedRanges || g.chance(0.3) {
			for k := 0; k < 1+g.r.IntN(3); k++ {
				r := g.sourceRange(isV6(svc.Spec.IPFamilies[g.r.IntN(len(svc.Spec.IPFamilies))]))
				if spacedRanges {
					r = "  " + r + " "
				}
				svc.Spec.LoadBalancerSourceRanges = append(svc.Spec.LoadBalancerSourceRanges, r)
			}
			if spacedRanges {
				gs.Shapes[ShapeSourceRangeSpaces] = true
			}
		}
	}
	if g.chance(0.2) && svc.Annotations[annotation.AllPortsKey] == "" {
		for _, f := range svc.Spec.IPFamilies {
			svc.Spec.ExternalIPs = append(svc.Spec.ExternalIPs, g.externalIP(isV6(f)).String())
		}
	}
}

// externallyAccessible is the API's rule for where externalTrafficPolicy may be set.
func externallyAccessible(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer || svc.Spec.Type == corev1.ServiceTypeNodePort ||
		(svc.Spec.Type == corev1.ServiceTypeClusterIP && len(svc.Spec.ExternalIPs) > 0)
}

// policies sets the traffic policies, ClientIP affinity (timeouts up to the 86400 maximum) and
// trafficDistribution, as the API server leaves them after defaulting.
func (g *gen) policies(gs *Generated) {
	svc := gs.Service
	itp := []corev1.ServiceInternalTrafficPolicy{corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceInternalTrafficPolicyLocal}[g.r.IntN(2)]
	svc.Spec.InternalTrafficPolicy = &itp
	if externallyAccessible(svc) {
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
		if g.chance(0.4) {
			svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
				if p, ok := g.takeNodePort(); ok {
					svc.Spec.HealthCheckNodePort = int32(p)
				} else {
					svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
				}
			}
		}
	}
	svc.Spec.SessionAffinity = corev1.ServiceAffinityNone
	if g.chance(0.3) {
		svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		t := []int32{1, 60, 10800, 86400}[g.r.IntN(4)]
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: &t}}
	}
	if g.chance(0.15) {
		td := corev1.ServiceTrafficDistributionPreferClose
		svc.Spec.TrafficDistribution = &td
	}
}

func (g *gen) takeNodePort() (uint16, bool) {
	if len(g.nodePorts) == 0 {
		return 0, false
	}
	p := g.nodePorts[len(g.nodePorts)-1]
	g.nodePorts = g.nodePorts[:len(g.nodePorts)-1]
	return p, true
}

// nodePortsFor gives every port of a NodePort or LoadBalancer Service a unique node port, as
// the API server allocates them; a Service that cannot get them all becomes a ClusterIP one.
func (g *gen) nodePortsFor(gs *Generated) {
	svc := gs.Service
	switch svc.Spec.Type {
	case corev1.ServiceTypeNodePort:
	case corev1.ServiceTypeLoadBalancer:
		alloc := !g.chance(0.2)
		svc.Spec.AllocateLoadBalancerNodePorts = &alloc
		if !alloc {
			return
		}
	default:
		return
	}
	if len(g.nodePorts) < len(svc.Spec.Ports) {
		svc.Spec.Type, svc.Spec.AllocateLoadBalancerNodePorts = corev1.ServiceTypeClusterIP, nil
		return
	}
	for i := range svc.Spec.Ports {
		p, _ := g.takeNodePort()
		svc.Spec.Ports[i].NodePort = int32(p)
	}
}

// registerClashable records the single node ports of a Service expected to be programmed, for a
// later ShapeNodePortClash Service to collide with.
func (g *gen) registerClashable(gs *Generated) {
	if gs.Expect.Outcome != Programmed {
		return
	}
	ranged := gs.Service.Annotations[annotation.PortRangesKey]
	for _, p := range gs.Service.Spec.Ports {
		if p.NodePort != 0 && (p.Name == "" || !strings.Contains(ranged, p.Name)) {
			g.clashable = append(g.clashable, clashPort{p.Protocol, p.NodePort, gs.Key().String()})
		}
	}
}

// portNames lists the model's port names of a Service's ports (all-ports: one per protocol).
func portNames(gs *Generated) []model.PortName {
	key := gs.Key()
	var out []model.PortName
	seen := map[model.PortName]bool{}
	for _, p := range gs.Service.Spec.Ports {
		pn := model.PortName{Service: key, Port: p.Name, Protocol: model.Protocol(p.Protocol)}
		if gs.Service.Annotations[annotation.AllPortsKey] == "true" {
			pn.Port = model.AllPortsName
		}
		if !seen[pn] {
			seen[pn] = true
			out = append(out, pn)
		}
	}
	return out
}
