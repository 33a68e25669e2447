package model

import (
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// DefaultAffinityTimeout is the ClientIP session affinity timeout the API server applies when
// a Service asks for affinity without a timeout (3 hours). The one definition in nftproxy: the
// conversion falls back to it and manifest mode defaults a Service with it, as the API server does.
const DefaultAffinityTimeout = time.Duration(corev1.DefaultClientIPServiceAffinitySeconds) * time.Second

// AllPortsName is PortName.Port of the one ServicePort an all-ports Service gets per protocol.
// The Service's own port names do not apply: the entry covers all of them and every other port.
const AllPortsName = "all"

// Ignored explains why a Service has no model at all. Ignored Services are not errors: upstream
// proxies skip them too, and nothing is reported for them.
type Ignored string

// Why a Service is ignored.
const (
	IgnoredHeadless     Ignored = "headless"     // clusterIP: None; DNS only
	IgnoredExternalName Ignored = "ExternalName" // a DNS CNAME, no proxying
	IgnoredProxyName    Ignored = "proxy-name"   // service-proxy-name label not ours
	IgnoredNil          Ignored = "nil-service"  // programming error guard
)

// Conversion is the result of FromService: exactly one of Service and Ignored is set. A rejected
// Service is a Service with Rejected set, not an ignored one, so that it is reported.
type Conversion struct {
	Service *Service
	Ignored Ignored
	// Warnings are problems that did not reject the Service, such as endpoints with bad
	// addresses that were skipped. They are meant for logs.
	Warnings []string
}

// HandlesService reports whether a proxy configured with proxyName handles a Service with these
// labels: with no name, only Services without the service-proxy-name label; with a name, only
// Services labelled with exactly that name. This lets nftproxy run beside kube-proxy.
func HandlesService(labels map[string]string, proxyName string) bool {
	v, ok := labels[annotation.ServiceProxyNameLabel]
	if proxyName == "" {
		return !ok
	}
	return ok && v == proxyName
}

// FromService converts a Service and the EndpointSlices that belong to it (the caller selects
// them by the kubernetes.io/service-name label) into the model, validating nftproxy's
// annotations. Slices of other Services are ignored. It does not look at other Services:
// cross-service conflicts are the Tracker's job.
func FromService(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) Conversion {
	parsed := make([]*EndpointSlice, len(slices))
	for i, s := range slices {
		parsed[i] = ParseEndpointSlice(s)
	}
	return fromService(svc, parsed)
}

// fromService is FromService with the slices parsed already (the Tracker keeps them so).
func fromService(svc *corev1.Service, slices []*EndpointSlice) Conversion {
	if svc == nil {
		return Conversion{Ignored: IgnoredNil}
	}
	key := ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return Conversion{Ignored: IgnoredExternalName}
	}
	allPorts, rej := parseAllPorts(key, svc)
	if rej != nil {
		return rejected(key, rej)
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		if allPorts {
			return rejected(key, reject(key, ReasonAllPortsHeadless,
				"%s is not supported on a headless Service (clusterIP: None); remove the annotation or give the Service a cluster IP",
				annotation.AllPortsKey))
		}
		return Conversion{Ignored: IgnoredHeadless}
	}
	common, rej := commonFields(key, svc)
	if rej != nil {
		return rejected(key, rej)
	}
	var ports []ServicePort
	if allPorts {
		ports, rej = allPortsPorts(key, svc, common)
	} else {
		ports, rej = specPorts(key, svc, common)
	}
	if rej != nil {
		return rejected(key, rej)
	}
	conv := Conversion{Service: &Service{Key: key}}
	eps := collectEndpoints(key, slices, common.families)
	conv.Warnings = eps.warnings
	for i := range ports {
		ports[i].Endpoints = eps.forPort(&ports[i])
	}
	conv.Service.Ports = ports
	return conv
}

func rejected(key ServiceKey, r *Rejection) Conversion {
	return Conversion{Service: &Service{Key: key, Rejected: r}}
}

func parseAllPorts(key ServiceKey, svc *corev1.Service) (bool, *Rejection) {
	v, ok := svc.Annotations[annotation.AllPortsKey]
	if !ok {
		return false, nil
	}
	b, err := annotation.ParseBool(v)
	if err != nil {
		return false, reject(key, ReasonAnnotationSyntax, "annotation %s: %v", annotation.AllPortsKey, err)
	}
	return b, nil
}

// common holds what every ServicePort of a Service shares.
type common struct {
	clusterIPs, externalIPs, lbIPs []netip.Addr
	sourceRanges                   []netip.Prefix
	externalLocal, internalLocal   bool
	healthCheckNodePort            uint16
	affinity                       time.Duration
	preferClose                    bool
	preferSameNode                 bool
	// families are the address families whose endpoints are used.
	families map[discoveryv1.AddressType]bool
	// nodePorts: whether the Service type has node ports at all.
	nodePorts bool
}

func commonFields(key ServiceKey, svc *corev1.Service) (*common, *Rejection) {
	c := &common{}
	var rej *Rejection
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	if c.clusterIPs, rej = parseAddrs(key, "clusterIPs", ips); rej != nil {
		return nil, rej
	}
	if c.externalIPs, rej = parseAddrs(key, "externalIPs", svc.Spec.ExternalIPs); rej != nil {
		return nil, rej
	}
	for _, s := range svc.Spec.LoadBalancerSourceRanges {
		// The API server accepts entries padded with spaces (a leftover of the annotation this
		// field replaced) and upstream proxies trim them; so does nftproxy.
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, reject(key, ReasonInvalidAddress,
				"loadBalancerSourceRanges entry %q is not a CIDR (%v); write it like 192.0.2.0/24", s, err)
		}
		c.sourceRanges = append(c.sourceRanges, p.Masked())
	}
	c.lbIPs = ingressIPs(svc)
	for _, f := range []struct {
		field, do string
		ips       []netip.Addr
	}{
		{"cluster IP", "use an address of the service CIDR", c.clusterIPs},
		{"externalIP", "remove it, or use an address that routes to the cluster", c.externalIPs},
		{"status.loadBalancer.ingress IP", "the load-balancer controller that wrote it must publish a routable address", c.lbIPs},
	} {
		if rej := specialAddrs(key, f.field, f.do, f.ips); rej != nil {
			return nil, rej
		}
	}
	c.nodePorts = svc.Spec.Type == corev1.ServiceTypeNodePort || svc.Spec.Type == corev1.ServiceTypeLoadBalancer
	external := c.nodePorts || len(c.externalIPs) > 0 || len(c.lbIPs) > 0
	c.externalLocal = external && svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
	c.internalLocal = svc.Spec.InternalTrafficPolicy != nil &&
		*svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
	if c.externalLocal && svc.Spec.Type == corev1.ServiceTypeLoadBalancer &&
		svc.Spec.HealthCheckNodePort > 0 && svc.Spec.HealthCheckNodePort <= annotation.MaxPort {
		c.healthCheckNodePort = uint16(svc.Spec.HealthCheckNodePort)
	}
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		c.affinity = DefaultAffinityTimeout
		cfg := svc.Spec.SessionAffinityConfig
		if cfg != nil && cfg.ClientIP != nil && cfg.ClientIP.TimeoutSeconds != nil && *cfg.ClientIP.TimeoutSeconds > 0 {
			c.affinity = time.Duration(*cfg.ClientIP.TimeoutSeconds) * time.Second
		}
	}
	if td := svc.Spec.TrafficDistribution; td != nil {
		// The EndpointSlice controller writes zone hints for all three and node hints for
		// PreferSameNode.
		c.preferSameNode = *td == corev1.ServiceTrafficDistributionPreferSameNode
		c.preferClose = c.preferSameNode || *td == corev1.ServiceTrafficDistributionPreferClose ||
			*td == corev1.ServiceTrafficDistributionPreferSameZone
	}
	c.families = endpointFamilies(c.clusterIPs, svc.Spec.IPFamilies)
	return c, nil
}

func parseAddrs(key ServiceKey, field string, in []string) ([]netip.Addr, *Rejection) {
	var out []netip.Addr
	for _, s := range in {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return nil, reject(key, ReasonInvalidAddress, "%s entry %q is not an IP address; fix or remove it", field, s)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

// ingressIPs returns status.loadBalancer.ingress IPs, skipping hostname-only entries, entries
// that do not parse, and ipMode: Proxy entries (the load balancer delivers to the node itself,
// so the VIP must not be captured on the node, as upstream does).
func ingressIPs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if ing.IP == "" || (ing.IPMode != nil && *ing.IPMode == corev1.LoadBalancerIPModeProxy) {
			continue
		}
		if a, err := netip.ParseAddr(ing.IP); err == nil && a.Zone() == "" {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// endpointFamilies picks the EndpointSlice address types to use: those of the cluster IPs, else
// those of spec.ipFamilies, else both (a file-mode Service without a cluster IP).
func endpointFamilies(clusterIPs []netip.Addr, families []corev1.IPFamily) map[discoveryv1.AddressType]bool {
	out := map[discoveryv1.AddressType]bool{}
	for _, a := range clusterIPs {
		if a.Is4() {
			out[discoveryv1.AddressTypeIPv4] = true
		} else {
			out[discoveryv1.AddressTypeIPv6] = true
		}
	}
	if len(out) == 0 {
		for _, f := range families {
			switch f {
			case corev1.IPv4Protocol:
				out[discoveryv1.AddressTypeIPv4] = true
			case corev1.IPv6Protocol:
				out[discoveryv1.AddressTypeIPv6] = true
			}
		}
	}
	if len(out) == 0 {
		out[discoveryv1.AddressTypeIPv4] = true
		out[discoveryv1.AddressTypeIPv6] = true
	}
	return out
}

// newPort fills the shared fields of a ServicePort.
func (c *common) newPort(name PortName) ServicePort {
	return ServicePort{
		Name:                     name,
		ClusterIPs:               c.clusterIPs,
		ExternalIPs:              c.externalIPs,
		LoadBalancerIPs:          c.lbIPs,
		LoadBalancerSourceRanges: c.sourceRanges,
		ExternalTrafficLocal:     c.externalLocal,
		InternalTrafficLocal:     c.internalLocal,
		HealthCheckNodePort:      c.healthCheckNodePort,
		AffinityTimeout:          c.affinity,
		PreferClose:              c.preferClose,
		PreferSameNode:           c.preferSameNode,
	}
}

func protocolOf(p corev1.Protocol) (Protocol, bool) {
	switch p {
	case corev1.ProtocolTCP, "":
		return TCP, true
	case corev1.ProtocolUDP:
		return UDP, true
	case corev1.ProtocolSCTP:
		return SCTP, true
	}
	return "", false
}
