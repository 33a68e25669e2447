package manifest

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// In a cluster the API server refuses malformed objects before nftproxy sees them; in manifest
// mode nothing stands in between, so the loader makes the API server's checks on what nftproxy
// reads (names, namespaces, IPs, ports, the enums of the spec) with the same helpers
// (k8s.io/apimachinery's validation packages), after defaulting. A name with '/' or NUL would
// otherwise reach chain names and comments, where two Services could collide.

// serviceProblems is what the API server would refuse in a defaulted Service, by the rejection
// reason it maps to: metadata and enums (model.ReasonAPIValidation), ports
// (model.ReasonInvalidPort), addresses (model.ReasonInvalidAddress).
type serviceProblems struct {
	meta, ports, addrs field.ErrorList
}

// rejection returns the Service's rejection, or nil if it is valid. The reason follows the
// first kind of problem found, in the order metadata, ports, addresses; the message lists all.
func (p serviceProblems) rejection(key model.ServiceKey, where string) *model.Rejection {
	reason := ""
	switch {
	case len(p.meta) > 0:
		reason = model.ReasonAPIValidation
	case len(p.ports) > 0:
		reason = model.ReasonInvalidPort
	case len(p.addrs) > 0:
		reason = model.ReasonInvalidAddress
	default:
		return nil
	}
	all := append(append(append(field.ErrorList{}, p.meta...), p.ports...), p.addrs...)
	return &model.Rejection{Reason: reason, Message: fmt.Sprintf(
		"service %s: %s: the API server would refuse it: %s; fix the manifest", key, where, errorsText(all))}
}

// errorsText joins field errors on one line, with the value quoted so a NUL or '/' shows.
func errorsText(errs field.ErrorList) string {
	parts := make([]string, len(errs))
	for i, e := range errs {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

var (
	serviceTypes     = map[corev1.ServiceType]bool{corev1.ServiceTypeClusterIP: true, corev1.ServiceTypeNodePort: true, corev1.ServiceTypeLoadBalancer: true, corev1.ServiceTypeExternalName: true}
	affinities       = map[corev1.ServiceAffinity]bool{corev1.ServiceAffinityNone: true, corev1.ServiceAffinityClientIP: true}
	externalPolicies = map[corev1.ServiceExternalTrafficPolicy]bool{corev1.ServiceExternalTrafficPolicyCluster: true, corev1.ServiceExternalTrafficPolicyLocal: true}
	internalPolicies = map[corev1.ServiceInternalTrafficPolicy]bool{corev1.ServiceInternalTrafficPolicyCluster: true, corev1.ServiceInternalTrafficPolicyLocal: true}
	protocols        = map[corev1.Protocol]bool{corev1.ProtocolTCP: true, corev1.ProtocolUDP: true, corev1.ProtocolSCTP: true}
	families         = map[corev1.IPFamily]bool{corev1.IPv4Protocol: true, corev1.IPv6Protocol: true}
)

// maxAffinitySeconds is the API server's upper bound for a ClientIP affinity timeout (a day).
const maxAffinitySeconds = 86400

// validateService checks a defaulted Service as the API server's create validation does, for
// the fields nftproxy reads.
func validateService(s *corev1.Service) serviceProblems {
	var p serviceProblems
	spec := field.NewPath("spec")
	p.meta = apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNS1035Label, field.NewPath("metadata"))
	if !serviceTypes[s.Spec.Type] {
		p.meta = append(p.meta, field.NotSupported(spec.Child("type"), s.Spec.Type, keys(serviceTypes)))
	}
	if s.Spec.Type == corev1.ServiceTypeExternalName {
		return p // nftproxy ignores ExternalName Services; only their metadata matters
	}
	if !affinities[s.Spec.SessionAffinity] {
		p.meta = append(p.meta, field.NotSupported(spec.Child("sessionAffinity"), s.Spec.SessionAffinity, keys(affinities)))
	}
	if c := s.Spec.SessionAffinityConfig; s.Spec.SessionAffinity == corev1.ServiceAffinityClientIP && c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		if t := *c.ClientIP.TimeoutSeconds; t <= 0 || t > maxAffinitySeconds {
			p.meta = append(p.meta, field.Invalid(spec.Child("sessionAffinityConfig", "clientIP", "timeoutSeconds"), t,
				fmt.Sprintf("must be greater than 0 and less than or equal to %d", maxAffinitySeconds)))
		}
	}
	if v := s.Spec.ExternalTrafficPolicy; v != "" && !externalPolicies[v] {
		p.meta = append(p.meta, field.NotSupported(spec.Child("externalTrafficPolicy"), v, keys(externalPolicies)))
	}
	if v := s.Spec.InternalTrafficPolicy; v != nil && !internalPolicies[*v] {
		p.meta = append(p.meta, field.NotSupported(spec.Child("internalTrafficPolicy"), *v, keys(internalPolicies)))
	}
	p.ports = validateServicePorts(s)
	p.addrs = validateServiceAddrs(s)
	return p
}

// validateServicePorts checks port names (DNS-1123 labels, required and unique when there are
// several), numbers, protocols, target ports (a number or an IANA service name) and node ports.
func validateServicePorts(s *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	path := field.NewPath("spec", "ports")
	headless := s.Spec.ClusterIP == corev1.ClusterIPNone
	// KEP-2610: an all-ports Service lists no ports (every port of TCP, UDP and SCTP). The API
	// server does not know the annotation and still requires one; manifest mode serves it.
	allPorts, _ := annotation.ParseBool(s.Annotations[annotation.AllPortsKey])
	if len(s.Spec.Ports) == 0 && !headless && !allPorts {
		errs = append(errs, field.Required(path, fmt.Sprintf(
			"a Service with a cluster IP needs at least one port (or %s: \"true\" to forward every port)", annotation.AllPortsKey)))
	}
	names := map[string]bool{}
	type pp struct {
		port  int32
		proto corev1.Protocol
	}
	seen, seenNode := map[pp]bool{}, map[pp]bool{}
	for i := range s.Spec.Ports {
		sp := &s.Spec.Ports[i]
		at := path.Index(i)
		switch {
		case sp.Name == "" && len(s.Spec.Ports) > 1:
			errs = append(errs, field.Required(at.Child("name"), "every port needs a name when a Service has several"))
		case sp.Name != "":
			errs = append(errs, messages(at.Child("name"), sp.Name, validation.IsDNS1123Label(sp.Name))...)
			if names[sp.Name] {
				errs = append(errs, field.Duplicate(at.Child("name"), sp.Name))
			}
			names[sp.Name] = true
		}
		errs = append(errs, messages(at.Child("port"), sp.Port, validation.IsValidPortNum(int(sp.Port)))...)
		if !protocols[sp.Protocol] {
			errs = append(errs, field.NotSupported(at.Child("protocol"), sp.Protocol, keys(protocols)))
		}
		if sp.TargetPort.Type == intstr.String {
			errs = append(errs, messages(at.Child("targetPort"), sp.TargetPort.StrVal, validation.IsValidPortName(sp.TargetPort.StrVal))...)
		} else {
			errs = append(errs, messages(at.Child("targetPort"), sp.TargetPort.IntVal, validation.IsValidPortNum(int(sp.TargetPort.IntVal)))...)
		}
		if key := (pp{sp.Port, sp.Protocol}); seen[key] {
			errs = append(errs, field.Duplicate(at, fmt.Sprintf("%d/%s", sp.Port, sp.Protocol)))
		} else {
			seen[key] = true
		}
		if sp.NodePort == 0 {
			continue
		}
		errs = append(errs, messages(at.Child("nodePort"), sp.NodePort, validation.IsValidPortNum(int(sp.NodePort)))...)
		if s.Spec.Type == corev1.ServiceTypeClusterIP {
			errs = append(errs, field.Forbidden(at.Child("nodePort"), "may not be used when `type` is 'ClusterIP'"))
		}
		if key := (pp{sp.NodePort, sp.Protocol}); seenNode[key] {
			errs = append(errs, field.Duplicate(at.Child("nodePort"), sp.NodePort))
		} else {
			seenNode[key] = true
		}
	}
	if hc := s.Spec.HealthCheckNodePort; hc != 0 {
		errs = append(errs, messages(field.NewPath("spec", "healthCheckNodePort"), hc, validation.IsValidPortNum(int(hc)))...)
	}
	return errs
}

// validateServiceAddrs checks clusterIPs against ipFamilies, externalIPs (valid and not a
// special address), loadBalancerSourceRanges (space-padding allowed, as the API server allows
// it) and the load-balancer ingress IPs.
func validateServiceAddrs(s *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec")
	ips := spec.Child("clusterIPs")
	if s.Spec.ClusterIP != "" && len(s.Spec.ClusterIPs) > 0 && s.Spec.ClusterIP != s.Spec.ClusterIPs[0] {
		errs = append(errs, field.Invalid(spec.Child("clusterIP"), s.Spec.ClusterIP, "must be the first entry of clusterIPs"))
	}
	if len(s.Spec.ClusterIPs) > 2 {
		errs = append(errs, field.TooMany(ips, len(s.Spec.ClusterIPs), 2))
	}
	var fams []corev1.IPFamily
	for i, ip := range s.Spec.ClusterIPs {
		if ip == corev1.ClusterIPNone {
			if len(s.Spec.ClusterIPs) > 1 {
				errs = append(errs, field.Invalid(ips.Index(i), ip, "'None' must be the only entry"))
			}
			continue
		}
		a, e := parseIP(ips.Index(i), ip)
		if len(e) > 0 {
			errs = append(errs, e...)
			continue
		}
		fams = append(fams, familyOf(a))
	}
	if len(fams) == 2 && fams[0] == fams[1] {
		errs = append(errs, field.Invalid(ips, s.Spec.ClusterIPs, "a dual-stack Service needs one address of each family"))
	}
	for i, f := range s.Spec.IPFamilies {
		at := spec.Child("ipFamilies").Index(i)
		switch {
		case !families[f]:
			errs = append(errs, field.NotSupported(at, f, keys(families)))
		case i < len(fams) && fams[i] != f:
			errs = append(errs, field.Invalid(at, f, fmt.Sprintf("does not match clusterIPs[%d] %q", i, s.Spec.ClusterIPs[i])))
		}
	}
	for i, ip := range s.Spec.ExternalIPs {
		at := spec.Child("externalIPs").Index(i)
		if a, e := parseIP(at, ip); len(e) > 0 {
			errs = append(errs, e...)
		} else if why := model.SpecialAddress(a); why != "" {
			errs = append(errs, field.Invalid(at, ip, why))
		}
	}
	for i, r := range s.Spec.LoadBalancerSourceRanges {
		errs = append(errs, validation.IsValidCIDR(spec.Child("loadBalancerSourceRanges").Index(i), strings.TrimSpace(r))...)
	}
	if ip := s.Spec.LoadBalancerIP; ip != "" {
		errs = append(errs, validation.IsValidIP(spec.Child("loadBalancerIP"), ip)...)
	}
	for i, in := range s.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			errs = append(errs, validation.IsValidIP(field.NewPath("status", "loadBalancer", "ingress").Index(i).Child("ip"), in.IP)...)
		}
	}
	return errs
}

// validateSliceMeta checks what makes a whole EndpointSlice unusable: its metadata, address
// type and ports. Endpoints are checked one by one (filterEndpoints).
func validateSliceMeta(s *discoveryv1.EndpointSlice) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	switch s.AddressType {
	case discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN:
	default:
		errs = append(errs, field.NotSupported(field.NewPath("addressType"), s.AddressType,
			[]discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN}))
	}
	names := map[string]bool{}
	for i, p := range s.Ports {
		at := field.NewPath("ports").Index(i)
		if p.Name != nil && *p.Name != "" {
			errs = append(errs, messages(at.Child("name"), *p.Name, validation.IsDNS1123Label(*p.Name))...)
			if names[*p.Name] {
				errs = append(errs, field.Duplicate(at.Child("name"), *p.Name))
			}
			names[*p.Name] = true
		}
		if p.Port != nil {
			errs = append(errs, messages(at.Child("port"), *p.Port, validation.IsValidPortNum(int(*p.Port)))...)
		}
		if p.Protocol != nil && !protocols[*p.Protocol] {
			errs = append(errs, field.NotSupported(at.Child("protocol"), *p.Protocol, keys(protocols)))
		}
	}
	return errs
}

// endpointProblem says why one endpoint of a slice is dropped, or "" if it is kept: an
// address that is not an IP of the slice's family or is special, or a malformed node name.
// Its field paths are built only for a problem found: building them for every endpoint was a
// fifth of the bytes a load allocated (26 MB at 100,000 endpoints).
func endpointProblem(s *discoveryv1.EndpointSlice, i int) string {
	e := &s.Endpoints[i]
	at := func() *field.Path { return field.NewPath("endpoints").Index(i) }
	if s.AddressType == discoveryv1.AddressTypeIPv4 || s.AddressType == discoveryv1.AddressTypeIPv6 {
		for j, addr := range e.Addresses {
			a, ok := canonicalIP(addr)
			if !ok {
				var errs field.ErrorList
				if a, errs = parseIP(at().Child("addresses").Index(j), addr); len(errs) > 0 {
					return errs.ToAggregate().Error()
				}
			}
			if (s.AddressType == discoveryv1.AddressTypeIPv4) != a.Is4() {
				return field.Invalid(at().Child("addresses").Index(j), addr, "must be an "+string(s.AddressType)+" address").Error()
			}
			if why := model.SpecialAddress(a); why != "" {
				return field.Invalid(at().Child("addresses").Index(j), addr, why).Error()
			}
		}
	}
	if e.NodeName != nil && !isDNSSubdomain(*e.NodeName) {
		if msgs := apivalidation.NameIsDNSSubdomain(*e.NodeName, false); len(msgs) > 0 {
			return messages(at().Child("nodeName"), *e.NodeName, msgs).ToAggregate().Error()
		}
	}
	return ""
}

// isDNSSubdomain reports whether s is a DNS-1123 subdomain (lower-case alphanumeric labels,
// inner '-' allowed, joined by '.', at most 253 bytes), as validation.IsDNS1123Subdomain
// decides with a regular expression: an endpoint's node name is checked here first, as the
// expression took 30 ms of a load at 100,000 endpoints, and only a name refused here is given
// to it for the message.
func isDNSSubdomain(s string) bool {
	if len(s) == 0 || len(s) > validation.DNS1123SubdomainMaxLength {
		return false
	}
	var prev byte = '.' // the byte before s[i]; a name starts like a label
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && prev != '.':
		case c == '.' && prev != '.' && prev != '-':
		default:
			return false
		}
		prev = c
	}
	return prev != '.' && prev != '-'
}

// validateNode checks a Node's metadata (its name is a DNS subdomain).
func validateNode(n *corev1.Node) field.ErrorList {
	return apivalidation.ValidateObjectMeta(&n.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
}

// canonicalIP parses s when it is an address validation.IsValidIP takes (it parses, has no
// zone, is not IPv4-mapped IPv6 and is written in canonical form), with one parse instead of
// IsValidIP's three; false means "ask parseIP", which says why not.
func canonicalIP(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || a.Is4In6() || a.String() != s {
		return netip.Addr{}, false
	}
	return a, true
}

// parseIP checks an address with the API server's rules (validation.IsValidIP: no leading
// zeros, no IPv4-mapped IPv6) and parses it.
func parseIP(path *field.Path, s string) (netip.Addr, field.ErrorList) {
	if errs := validation.IsValidIP(path, s); len(errs) > 0 {
		return netip.Addr{}, errs
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, field.ErrorList{field.Invalid(path, s, err.Error())}
	}
	return a, nil
}

func familyOf(a netip.Addr) corev1.IPFamily {
	if a.Unmap().Is4() {
		return corev1.IPv4Protocol
	}
	return corev1.IPv6Protocol
}

// messages turns the []string of a util/validation helper into field errors.
func messages(path *field.Path, value any, msgs []string) field.ErrorList {
	var errs field.ErrorList
	for _, m := range msgs {
		errs = append(errs, field.Invalid(path, value, m))
	}
	return errs
}

// keys lists a set's members for NotSupported errors.
func keys[K ~string](set map[K]bool) []K {
	out := make([]K, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
