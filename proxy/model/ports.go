package model

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// parseRanges reads one range annotation, mapping syntax errors to reasons.
func parseRanges(key ServiceKey, svc *corev1.Service, annKey string) ([]annotation.PortRange, *Rejection) {
	v, ok := svc.Annotations[annKey]
	if !ok {
		return nil, nil
	}
	ranges, err := annotation.ParseRanges(v)
	if err == nil {
		return ranges, nil
	}
	reason := ReasonAnnotationSyntax
	switch annotation.KindOf(err) {
	case annotation.EndBeforeStart:
		reason = ReasonRangeEndBeforeStart
	case annotation.EndTooLarge:
		reason = ReasonRangeEndTooLarge
	}
	return nil, reject(key, reason, "annotation %s: %v", annKey, err)
}

// specPorts builds one ServicePort per spec port, turning those named in port-ranges into ranges.
func specPorts(key ServiceKey, svc *corev1.Service, c *common) ([]ServicePort, *Rejection) {
	ranges, rej := parseRanges(key, svc, annotation.PortRangesKey)
	if rej != nil {
		return nil, rej
	}
	nodeRanges, rej := parseRanges(key, svc, annotation.NodePortRangesKey)
	if rej != nil {
		return nil, rej
	}
	rangeByName, rej := checkRangeNames(key, svc, ranges, nodeRanges)
	if rej != nil {
		return nil, rej
	}
	nodeByName := map[string]annotation.PortRange{}
	for _, r := range nodeRanges {
		nodeByName[r.Name] = r
	}
	if len(svc.Spec.Ports) == 0 {
		return nil, reject(key, ReasonInvalidPort,
			"spec.ports is empty, so there is nothing to forward; list the ports, or set %s: \"true\" to forward every port of TCP, UDP and SCTP",
			annotation.AllPortsKey)
	}
	ports := make([]ServicePort, 0, len(svc.Spec.Ports))
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		proto, rej := checkSpecPort(key, p)
		if rej != nil {
			return nil, rej
		}
		sp := c.newPort(PortName{Service: key, Port: p.Name, Protocol: proto})
		sp.Port, sp.PortEnd = uint16(p.Port), uint16(p.Port)
		if r, ok := rangeByName[p.Name]; ok {
			if int32(r.Start) != p.Port {
				return nil, reject(key, ReasonRangeStartMismatch,
					"annotation %s entry %q starts at %d but port %q is %d; the range must start at the port, so set port: %d or start the range at %d",
					annotation.PortRangesKey, r.String(), r.Start, p.Name, p.Port, r.Start, p.Port)
			}
			if rej := checkKeepsPort(key, p, "a port range"); rej != nil {
				return nil, rej
			}
			sp.PortEnd = r.End
			if nr, ok := nodeByName[p.Name]; ok && c.nodePorts {
				sp.NodePort, sp.NodePortEnd = nr.Start, nr.End
			}
		} else {
			setTarget(&sp, p)
			if c.nodePorts && p.NodePort > 0 && p.NodePort <= annotation.MaxPort {
				sp.NodePort, sp.NodePortEnd = uint16(p.NodePort), uint16(p.NodePort)
			}
		}
		ports = append(ports, sp)
	}
	if rej := checkOverlaps(key, ports); rej != nil {
		return nil, rej
	}
	return ports, nil
}

// checkRangeNames checks that every port-ranges entry names a spec port and every
// node-port-ranges entry names a ranged port with the same width.
func checkRangeNames(key ServiceKey, svc *corev1.Service, ranges, nodeRanges []annotation.PortRange) (map[string]annotation.PortRange, *Rejection) {
	names := map[string]bool{}
	var list []string
	for _, p := range svc.Spec.Ports {
		names[p.Name] = true
		list = append(list, fmt.Sprintf("%q", p.Name))
	}
	byName := map[string]annotation.PortRange{}
	for _, r := range ranges {
		if !names[r.Name] {
			return nil, reject(key, ReasonUnknownPortName,
				"annotation %s entry %q names port %q, which is not in spec.ports (ports: %s); use the name of a port",
				annotation.PortRangesKey, r.String(), r.Name, strings.Join(list, ", "))
		}
		byName[r.Name] = r
	}
	for _, nr := range nodeRanges {
		r, ok := byName[nr.Name]
		if !ok {
			return nil, reject(key, ReasonNodePortRangeUnknownName,
				"annotation %s entry %q names port %q, which has no entry in %s; node-port blocks exist only for port ranges",
				annotation.NodePortRangesKey, nr.String(), nr.Name, annotation.PortRangesKey)
		}
		if nr.Width() != r.Width() {
			return nil, reject(key, ReasonNodePortRangeWidth,
				"annotation %s entry %q is %d ports wide but port range %q is %d; the node-port block must have the range's width",
				annotation.NodePortRangesKey, nr.String(), nr.Width(), r.String(), r.Width())
		}
	}
	return byName, nil
}

func checkSpecPort(key ServiceKey, p *corev1.ServicePort) (Protocol, *Rejection) {
	proto, ok := protocolOf(p.Protocol)
	if !ok {
		return "", reject(key, ReasonInvalidPort, "port %q has protocol %q; use TCP, UDP or SCTP", p.Name, p.Protocol)
	}
	if p.Port < 1 || p.Port > annotation.MaxPort {
		return "", reject(key, ReasonInvalidPort, "port %q is %d; ports are 1-65535", p.Name, p.Port)
	}
	return proto, nil
}

// checkKeepsPort enforces that a range or all-ports port does not remap: its targetPort must be
// unset or equal to its port. A named targetPort is rejected too, even if the pods happen to
// name that very port, because traffic keeps its destination port and could not follow a name.
func checkKeepsPort(key ServiceKey, p *corev1.ServicePort, what string) *Rejection {
	tp := p.TargetPort
	if tp.Type == intstr.Int && (tp.IntVal == 0 || tp.IntVal == p.Port) {
		return nil
	}
	return reject(key, ReasonTargetPortRemap,
		"port %q is %s and keeps the destination port, but targetPort is %s; remove targetPort or set it to %d",
		p.Name, what, tp.String(), p.Port)
}

// setTarget records a single port's targetPort: numeric (0 means "same as port"), or a name
// resolved per endpoint.
func setTarget(sp *ServicePort, p *corev1.ServicePort) {
	tp := p.TargetPort
	switch {
	case tp.Type == intstr.String && tp.StrVal != "":
		sp.TargetPortName = tp.StrVal
	case tp.Type == intstr.Int && tp.IntVal > 0 && tp.IntVal <= annotation.MaxPort:
		sp.TargetPort = uint16(tp.IntVal)
	default:
		sp.TargetPort = uint16(p.Port)
	}
}

// allPortsPorts builds the one ServicePort per protocol of an all-ports Service: the protocols
// of its ports, or TCP, UDP and SCTP when it lists none.
func allPortsPorts(key ServiceKey, svc *corev1.Service, c *common) ([]ServicePort, *Rejection) {
	switch {
	case svc.Spec.Type == corev1.ServiceTypeNodePort:
		return nil, reject(key, ReasonAllPortsNodePort,
			"%s is not supported on type NodePort: it would forward every port of the node's addresses; use type ClusterIP or LoadBalancer",
			annotation.AllPortsKey)
	case len(c.externalIPs) > 0:
		return nil, reject(key, ReasonAllPortsExternalIPs,
			"%s is not supported with externalIPs (they may be node addresses); remove spec.externalIPs or the annotation",
			annotation.AllPortsKey)
	case strings.TrimSpace(svc.Annotations[annotation.PortRangesKey]) != "":
		return nil, reject(key, ReasonAllPortsWithRanges,
			"%s and %s are both set; all-ports already covers every port, so remove %s",
			annotation.AllPortsKey, annotation.PortRangesKey, annotation.PortRangesKey)
	case strings.TrimSpace(svc.Annotations[annotation.NodePortRangesKey]) != "":
		return nil, reject(key, ReasonNodePortRangeUnknownName,
			"%s is set but an %s Service has no node ports; remove %s",
			annotation.NodePortRangesKey, annotation.AllPortsKey, annotation.NodePortRangesKey)
	}
	if len(svc.Spec.Ports) == 0 {
		// KEP-2610 has an all-ports Service list no ports; the API server still requires
		// one, so only manifest mode meets this. With no protocol named, every protocol.
		var ports []ServicePort
		for _, proto := range []Protocol{TCP, UDP, SCTP} {
			sp := c.newPort(PortName{Service: key, Port: AllPortsName, Protocol: proto})
			sp.AllPorts = true
			ports = append(ports, sp)
		}
		return ports, nil
	}
	var ports []ServicePort
	seen := map[Protocol]bool{}
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		proto, rej := checkSpecPort(key, p)
		if rej != nil {
			return nil, rej
		}
		if rej := checkKeepsPort(key, p, "part of an all-ports Service"); rej != nil {
			return nil, rej
		}
		if seen[proto] {
			continue
		}
		seen[proto] = true
		sp := c.newPort(PortName{Service: key, Port: AllPortsName, Protocol: proto})
		sp.AllPorts = true
		ports = append(ports, sp)
	}
	return ports, nil
}

// span is one port interval a ServicePort uses, for overlap checks.
type span struct {
	proto  Protocol
	lo, hi uint16
	port   string // ServicePort name
}

func (s span) String() string {
	if s.lo == s.hi {
		return fmt.Sprintf("%s %d", s.proto, s.lo)
	}
	return fmt.Sprintf("%s %d-%d", s.proto, s.lo, s.hi)
}

// checkOverlaps rejects a Service whose service ports, or whose node ports, overlap within one
// protocol.
func checkOverlaps(key ServiceKey, ports []ServicePort) *Rejection {
	var svcSpans, nodeSpans []span
	for i := range ports {
		p := &ports[i]
		svcSpans = append(svcSpans, span{p.Name.Protocol, p.Port, p.PortEnd, p.Name.Port})
		if p.NodePort != 0 {
			nodeSpans = append(nodeSpans, span{p.Name.Protocol, p.NodePort, p.NodePortEnd, p.Name.Port})
		}
	}
	for _, set := range []struct {
		what  string
		spans []span
	}{{"port", svcSpans}, {"node port", nodeSpans}} {
		if a, b, ok := firstOverlap(set.spans); ok {
			return reject(key, ReasonPortOverlap,
				"%s %q (%s) overlaps %s %q (%s); ports of one protocol must not overlap, so change one of them",
				set.what, a.port, a, set.what, b.port, b)
		}
	}
	return nil
}

// firstOverlap sorts spans by protocol and start and returns the first overlapping pair.
func firstOverlap(spans []span) (span, span, bool) {
	sorted := append([]span(nil), spans...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].proto != sorted[j].proto {
			return sorted[i].proto < sorted[j].proto
		}
		return sorted[i].lo < sorted[j].lo
	})
	// With spans sorted by start, a span overlaps an earlier one exactly when it starts at or
	// before the end of the widest earlier span of its protocol.
	var widest span
	for i, s := range sorted {
		if i > 0 && widest.proto == s.proto && widest.hi >= s.lo {
			return widest, s, true
		}
		if i == 0 || widest.proto != s.proto || s.hi > widest.hi {
			widest = s
		}
	}
	return span{}, span{}, false
}
