package manifest

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// defaultService fills in what the API server would have set, so a hand-written manifest means
// the same as the object a cluster would hand to nftproxy. Allocations (cluster IPs, node ports)
// are not invented: a manifest without them simply has none.
func defaultService(s *corev1.Service) {
	if s.Namespace == "" {
		s.Namespace = corev1.NamespaceDefault
	}
	spec := &s.Spec
	if spec.Type == "" {
		spec.Type = corev1.ServiceTypeClusterIP
	}
	if len(spec.ClusterIPs) == 0 && spec.ClusterIP != "" {
		spec.ClusterIPs = []string{spec.ClusterIP}
	}
	if spec.ClusterIP == "" && len(spec.ClusterIPs) > 0 {
		spec.ClusterIP = spec.ClusterIPs[0]
	}
	if len(spec.IPFamilies) == 0 {
		for _, ip := range spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				if a.Unmap().Is4() {
					spec.IPFamilies = append(spec.IPFamilies, corev1.IPv4Protocol)
				} else {
					spec.IPFamilies = append(spec.IPFamilies, corev1.IPv6Protocol)
				}
			}
		}
	}
	if spec.IPFamilyPolicy == nil && len(spec.IPFamilies) > 0 {
		p := corev1.IPFamilyPolicySingleStack
		if len(spec.IPFamilies) > 1 {
			p = corev1.IPFamilyPolicyRequireDualStack
		}
		spec.IPFamilyPolicy = &p
	}
	if spec.SessionAffinity == "" {
		spec.SessionAffinity = corev1.ServiceAffinityNone
	}
	if spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		if spec.SessionAffinityConfig == nil {
			spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{}
		}
		if spec.SessionAffinityConfig.ClientIP == nil {
			spec.SessionAffinityConfig.ClientIP = &corev1.ClientIPConfig{}
		}
		if spec.SessionAffinityConfig.ClientIP.TimeoutSeconds == nil {
			t := int32(model.DefaultAffinityTimeout / time.Second)
			spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = &t
		}
	}
	external := spec.Type == corev1.ServiceTypeNodePort || spec.Type == corev1.ServiceTypeLoadBalancer || len(spec.ExternalIPs) > 0
	if external && spec.ExternalTrafficPolicy == "" {
		spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyCluster
	}
	if spec.Type != corev1.ServiceTypeExternalName && spec.InternalTrafficPolicy == nil {
		p := corev1.ServiceInternalTrafficPolicyCluster
		spec.InternalTrafficPolicy = &p
	}
	if spec.Type == corev1.ServiceTypeLoadBalancer && spec.AllocateLoadBalancerNodePorts == nil {
		b := true
		spec.AllocateLoadBalancerNodePorts = &b
	}
	for i := range spec.Ports {
		p := &spec.Ports[i]
		if p.Protocol == "" {
			p.Protocol = corev1.ProtocolTCP
		}
		if p.TargetPort == (intstr.IntOrString{}) {
			p.TargetPort = intstr.FromInt32(p.Port)
		}
	}
}

// defaultEndpointSlice fills in port protocol (TCP) and name ("") as the API server does.
func defaultEndpointSlice(s *discoveryv1.EndpointSlice) {
	if s.Namespace == "" {
		s.Namespace = corev1.NamespaceDefault
	}
	for i := range s.Ports {
		p := &s.Ports[i]
		if p.Protocol == nil {
			proto := corev1.ProtocolTCP
			p.Protocol = &proto
		}
		if p.Name == nil {
			name := ""
			p.Name = &name
		}
	}
}
