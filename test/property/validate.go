package property

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The API server's own validation (k8s.io/kubernetes pkg/apis/core/validation) is not a
// dependency of this module; these checks call the same apimachinery helpers it calls for every
// field the generator sets, and restate its cross-field rules for Services (ValidateService) and
// EndpointSlices (ValidateEndpointSlice) that apply to them. Anything they refuse is a generator
// bug, never test input.

// validateGenerated checks one Service and its slices.
func validateGenerated(gs *Generated) error {
	var errs field.ErrorList
	errs = append(errs, validateService(gs.Service)...)
	for i, s := range gs.Slices {
		errs = append(errs, validateSlice(s, field.NewPath("slices").Index(i))...)
	}
	if len(errs) > 0 {
		return fmt.Errorf("service %s/%s: %v", gs.Service.Namespace, gs.Service.Name, errs.ToAggregate())
	}
	return nil
}

// validateBatch checks what the API server's allocators guarantee across Services: cluster IPs
// are unique, and so are node ports and health-check node ports (one pool for every protocol),
// except where ShapeNodePortClash breaks that on purpose.
func validateBatch(b *Batch, reserved []netip.Addr) error {
	ips := map[string]string{}
	for _, a := range reserved {
		ips[a.String()] = "reserved"
	}
	ports := map[int32]string{}
	for _, gs := range b.Services {
		svc := gs.Service
		key := svc.Namespace + "/" + svc.Name
		for _, ip := range svc.Spec.ClusterIPs {
			if ip == corev1.ClusterIPNone {
				continue
			}
			if other, ok := ips[ip]; ok {
				return fmt.Errorf("cluster IP %s of %s is also %s's", ip, key, other)
			}
			ips[ip] = key
		}
		if gs.Shapes[ShapeNodePortClash] {
			continue
		}
		nps := []int32{svc.Spec.HealthCheckNodePort}
		for _, p := range svc.Spec.Ports {
			nps = append(nps, p.NodePort)
		}
		for _, np := range nps {
			if np == 0 {
				continue
			}
			if other, ok := ports[np]; ok {
				return fmt.Errorf("node port %d of %s is also %s's", np, key, other)
			}
			ports[np] = key
		}
	}
	return nil
}

func strs(fp *field.Path, v any, msgs []string) field.ErrorList {
	var out field.ErrorList
	for _, m := range msgs {
		out = append(out, field.Invalid(fp, v, m))
	}
	return out
}

func validateService(svc *corev1.Service) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&svc.ObjectMeta, true, apivalidation.NameIsDNS1035Label, field.NewPath("metadata"))
	spec := &svc.Spec
	sp := field.NewPath("spec")
	if spec.Type == corev1.ServiceTypeExternalName {
		errs = append(errs, strs(sp.Child("externalName"), spec.ExternalName, validation.IsDNS1123Subdomain(spec.ExternalName))...)
		return errs
	}
	errs = append(errs, validateServicePorts(svc)...)
	errs = append(errs, validateClusterIPs(svc)...)
	for i, ip := range spec.ExternalIPs {
		fp := sp.Child("externalIPs").Index(i)
		errs = append(errs, validation.IsValidIP(fp, ip)...)
		if a, err := netip.ParseAddr(ip); err == nil && (a.IsLoopback() || a.IsUnspecified() || a.IsLinkLocalUnicast() || a.IsMulticast()) {
			errs = append(errs, field.Invalid(fp, ip, "may not be a special address"))
		}
	}
	if len(spec.LoadBalancerSourceRanges) > 0 && spec.Type != corev1.ServiceTypeLoadBalancer {
		errs = append(errs, field.Forbidden(sp.Child("loadBalancerSourceRanges"), "only for type LoadBalancer"))
	}
	for i, r := range spec.LoadBalancerSourceRanges {
		// ValidateService trims each entry before checking it.
		errs = append(errs, validation.IsValidCIDR(sp.Child("loadBalancerSourceRanges").Index(i), strings.TrimSpace(r))...)
	}
	for i, ing := range svc.Status.LoadBalancer.Ingress {
		fp := field.NewPath("status", "loadBalancer", "ingress").Index(i)
		if ing.IP != "" {
			errs = append(errs, validation.IsValidIP(fp.Child("ip"), ing.IP)...)
		} else if ing.IPMode != nil {
			errs = append(errs, field.Forbidden(fp.Child("ipMode"), "only with an ip"))
		}
		if ing.Hostname != "" {
			errs = append(errs, strs(fp.Child("hostname"), ing.Hostname, validation.IsDNS1123Subdomain(ing.Hostname))...)
		}
	}
	errs = append(errs, validatePolicies(svc)...)
	return errs
}

func validateServicePorts(svc *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	spec := &svc.Spec
	names := map[string]bool{}
	portProto := map[string]bool{}
	nodePorts := map[string]bool{}
	for i, p := range spec.Ports {
		fp := field.NewPath("spec", "ports").Index(i)
		if len(spec.Ports) > 1 && p.Name == "" {
			errs = append(errs, field.Required(fp.Child("name"), "every port of a multi-port Service is named"))
		}
		if p.Name != "" {
			errs = append(errs, strs(fp.Child("name"), p.Name, validation.IsValidPortName(p.Name))...)
			if names[p.Name] {
				errs = append(errs, field.Duplicate(fp.Child("name"), p.Name))
			}
			names[p.Name] = true
		}
		switch p.Protocol {
		case corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP:
		default:
			errs = append(errs, field.NotSupported(fp.Child("protocol"), p.Protocol, []string{"TCP", "UDP", "SCTP"}))
		}
		errs = append(errs, strs(fp.Child("port"), p.Port, validation.IsValidPortNum(int(p.Port)))...)
		if k := fmt.Sprintf("%d/%s", p.Port, p.Protocol); portProto[k] {
			errs = append(errs, field.Duplicate(fp, k))
		} else {
			portProto[k] = true
		}
		if p.TargetPort.StrVal != "" {
			errs = append(errs, strs(fp.Child("targetPort"), p.TargetPort.StrVal, validation.IsValidPortName(p.TargetPort.StrVal))...)
		} else {
			errs = append(errs, strs(fp.Child("targetPort"), p.TargetPort.IntVal, validation.IsValidPortNum(int(p.TargetPort.IntVal)))...)
		}
		if p.NodePort != 0 {
			if spec.Type != corev1.ServiceTypeNodePort && spec.Type != corev1.ServiceTypeLoadBalancer {
				errs = append(errs, field.Forbidden(fp.Child("nodePort"), "only for NodePort and LoadBalancer"))
			}
			errs = append(errs, strs(fp.Child("nodePort"), p.NodePort, validation.IsInRange(int(p.NodePort), nodePortFirst, nodePortLast))...)
			if k := fmt.Sprintf("%d/%s", p.NodePort, p.Protocol); nodePorts[k] {
				errs = append(errs, field.Duplicate(fp.Child("nodePort"), k))
			} else {
				nodePorts[k] = true
			}
		}
	}
	return errs
}

func validateClusterIPs(svc *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	spec := &svc.Spec
	fp := field.NewPath("spec", "clusterIPs")
	if len(spec.ClusterIPs) == 0 || spec.ClusterIP != spec.ClusterIPs[0] {
		return append(errs, field.Invalid(fp, spec.ClusterIPs, "clusterIPs[0] must be clusterIP"))
	}
	if spec.ClusterIP == corev1.ClusterIPNone {
		return errs
	}
	if len(spec.ClusterIPs) > 2 || len(spec.ClusterIPs) != len(spec.IPFamilies) {
		return append(errs, field.Invalid(fp, spec.ClusterIPs, "one cluster IP per family in ipFamilies, at most two"))
	}
	if len(spec.ClusterIPs) == 2 && (spec.IPFamilyPolicy == nil || *spec.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack) {
		errs = append(errs, field.Invalid(field.NewPath("spec", "ipFamilyPolicy"), spec.IPFamilyPolicy, "two families need a dual-stack policy"))
	}
	for i, ip := range spec.ClusterIPs {
		errs = append(errs, validation.IsValidIP(fp.Index(i), ip)...)
		if a, err := netip.ParseAddr(ip); err == nil && a.Is6() != isV6(spec.IPFamilies[i]) {
			errs = append(errs, field.Invalid(fp.Index(i), ip, "must be of family "+string(spec.IPFamilies[i])))
		}
	}
	if len(spec.IPFamilies) == 2 && spec.IPFamilies[0] == spec.IPFamilies[1] {
		errs = append(errs, field.Duplicate(field.NewPath("spec", "ipFamilies"), spec.IPFamilies))
	}
	return errs
}

func validatePolicies(svc *corev1.Service) field.ErrorList {
	var errs field.ErrorList
	spec := &svc.Spec
	sp := field.NewPath("spec")
	switch spec.SessionAffinity {
	case corev1.ServiceAffinityNone:
		if spec.SessionAffinityConfig != nil {
			errs = append(errs, field.Forbidden(sp.Child("sessionAffinityConfig"), "only with ClientIP"))
		}
	case corev1.ServiceAffinityClientIP:
		c := spec.SessionAffinityConfig
		if c == nil || c.ClientIP == nil || c.ClientIP.TimeoutSeconds == nil {
			errs = append(errs, field.Required(sp.Child("sessionAffinityConfig"), "defaulted by the API server"))
		} else if t := *c.ClientIP.TimeoutSeconds; t < 1 || t > 86400 {
			errs = append(errs, field.Invalid(sp.Child("sessionAffinityConfig", "clientIP", "timeoutSeconds"), t, "1..86400"))
		}
	default:
		errs = append(errs, field.NotSupported(sp.Child("sessionAffinity"), spec.SessionAffinity, []string{"None", "ClientIP"}))
	}
	ext := externallyAccessible(svc)
	switch {
	case !ext && spec.ExternalTrafficPolicy != "":
		errs = append(errs, field.Forbidden(sp.Child("externalTrafficPolicy"), "only for externally accessible Services"))
	case ext && spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyCluster && spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal:
		errs = append(errs, field.NotSupported(sp.Child("externalTrafficPolicy"), spec.ExternalTrafficPolicy, []string{"Cluster", "Local"}))
	}
	if spec.HealthCheckNodePort != 0 {
		if spec.Type != corev1.ServiceTypeLoadBalancer || spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
			errs = append(errs, field.Forbidden(sp.Child("healthCheckNodePort"), "only for LoadBalancer with externalTrafficPolicy Local"))
		}
		errs = append(errs, strs(sp.Child("healthCheckNodePort"), spec.HealthCheckNodePort, validation.IsInRange(int(spec.HealthCheckNodePort), nodePortFirst, nodePortLast))...)
	}
	if spec.AllocateLoadBalancerNodePorts != nil && spec.Type != corev1.ServiceTypeLoadBalancer {
		errs = append(errs, field.Forbidden(sp.Child("allocateLoadBalancerNodePorts"), "only for LoadBalancer"))
	}
	if p := spec.InternalTrafficPolicy; p != nil && *p != corev1.ServiceInternalTrafficPolicyCluster && *p != corev1.ServiceInternalTrafficPolicyLocal {
		errs = append(errs, field.NotSupported(sp.Child("internalTrafficPolicy"), *p, []string{"Cluster", "Local"}))
	}
	return errs
}

func validateSlice(s *discoveryv1.EndpointSlice, fp *field.Path) field.ErrorList {
	errs := apivalidation.ValidateObjectMeta(&s.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, fp.Child("metadata"))
	errs = append(errs, metav1validation.ValidateLabels(s.Labels, fp.Child("metadata", "labels"))...)
	if len(s.Endpoints) > 1000 || len(s.Ports) > 20000 {
		errs = append(errs, field.TooMany(fp.Child("endpoints"), len(s.Endpoints), 1000))
	}
	for i, ep := range s.Endpoints {
		efp := fp.Child("endpoints").Index(i)
		if len(ep.Addresses) != 1 {
			errs = append(errs, field.Invalid(efp.Child("addresses"), ep.Addresses, "exactly one address"))
		}
		for _, a := range ep.Addresses {
			errs = append(errs, validation.IsValidIP(efp.Child("addresses"), a)...)
			if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() != (s.AddressType == discoveryv1.AddressTypeIPv6) {
				errs = append(errs, field.Invalid(efp.Child("addresses"), a, "must match addressType "+string(s.AddressType)))
			}
		}
		if ep.NodeName != nil {
			errs = append(errs, strs(efp.Child("nodeName"), *ep.NodeName, validation.IsDNS1123Subdomain(*ep.NodeName))...)
		}
		if ep.Zone != nil {
			errs = append(errs, strs(efp.Child("zone"), *ep.Zone, validation.IsValidLabelValue(*ep.Zone))...)
		}
	}
	for i, p := range s.Ports {
		pfp := fp.Child("ports").Index(i)
		if p.Name != nil && *p.Name != "" {
			errs = append(errs, strs(pfp.Child("name"), *p.Name, validation.IsValidPortName(*p.Name))...)
		}
		if p.Port != nil {
			errs = append(errs, strs(pfp.Child("port"), *p.Port, validation.IsValidPortNum(int(*p.Port)))...)
		}
	}
	return errs
}
