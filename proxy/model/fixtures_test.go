package model

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Address plan for every test in this package:
//
//	cluster IPs      10.96.0.0/16, fd00:96::/64
//	external IPs     192.0.2.0/24
//	LB ingress IPs   198.51.100.0/24
//	pod IPs          10.244.0.0/16, fd00:244::/64

func svcFixture(name string, mods ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{
				Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080),
			}},
		},
	}
	for _, m := range mods {
		m(s)
	}
	return s
}

func annotate(kv ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			s.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func withPorts(ports ...corev1.ServicePort) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.Ports = ports }
}

func tcpPort(name string, port int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: target}
}

func ptr[T any](v T) *T { return &v }

type epFixture struct {
	addr                      string
	ready, serving, terminate *bool
	node, zone                string
}

func sliceFixture(name, svc string, family discoveryv1.AddressType, ports []discoveryv1.EndpointPort, eps ...epFixture) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: family,
		Ports:       ports,
	}
	for _, e := range eps {
		ep := discoveryv1.Endpoint{Addresses: []string{e.addr},
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminate}}
		if e.node != "" {
			ep.NodeName = ptr(e.node)
		}
		if e.zone != "" {
			ep.Zone = ptr(e.zone)
			ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: e.zone}}}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

func slicePortFixture(name string, port int32) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr(name), Port: ptr(port), Protocol: ptr(corev1.ProtocolTCP)}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }
