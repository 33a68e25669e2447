package workload

import (
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// Annotations and labels the API objects carry (nftproxy's and Kubernetes' own names).
const (
	annoPortRanges  = "nftproxy.io/port-ranges"
	annoAllPorts    = "nftproxy.io/all-ports"
	labelService    = "kubernetes.io/service-name"
	labelManagedBy  = "endpointslice.kubernetes.io/managed-by"
	annoTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"
)

// APINodePortOffset moves non-TCP node ports of the API objects clear of the TCP ones.
const APINodePortOffset = 15000

// reservedClusterIP is the address the API server gives the default/kubernetes Service; the
// Service that would get it in the model asks the API server for any address instead.
var reservedClusterIP = netip.MustParseAddr("198.19.0.1")

// ServiceObject is s as a Kubernetes Service: NodePort when a port has a node port, ClusterIP
// otherwise; port ranges and all-ports through nftproxy's annotations (a peer that does not know
// them programs the first port only, as upstream kube-proxy would).
func ServiceObject(s *model.Service) *corev1.Service {
	o := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: s.Key.Namespace, Name: s.Key.Name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	var ranges []string
	for _, p := range s.Ports {
		if len(p.ClusterIPs) > 0 && p.ClusterIPs[0] != reservedClusterIP {
			o.Spec.ClusterIP = p.ClusterIPs[0].String()
		}
		port := corev1.ServicePort{Name: p.Name.Port, Protocol: corev1.Protocol(string(p.Name.Protocol)), Port: int32(p.Port)}
		switch {
		case p.AllPorts:
			port.Port = 1
			o.Annotations = map[string]string{annoAllPorts: "true"}
		case p.IsRange():
			ranges = append(ranges, fmt.Sprintf("%s=%d-%d", p.Name.Port, p.Port, p.PortEnd))
		default:
			port.TargetPort = intstr.FromInt32(int32(p.TargetPort))
		}
		if p.NodePort != 0 {
			o.Spec.Type = corev1.ServiceTypeNodePort
			port.NodePort = int32(p.NodePort)
			if p.Name.Protocol != model.TCP {
				// The API server's node-port allocator ignores the protocol; the model
				// numbers each protocol from FirstNodePort.
				port.NodePort += APINodePortOffset
			}
		}
		o.Spec.Ports = append(o.Spec.Ports, port)
	}
	if len(ranges) > 0 {
		o.Annotations = map[string]string{annoPortRanges: strings.Join(ranges, ",")}
	}
	return o
}

// SliceObject is the EndpointSlice of s (one per Service, every port), named after it, with the
// trigger-time annotation the EndpointSlice controller sets (peers compute their network
// programming latency from it).
func SliceObject(s *model.Service, trigger time.Time) *discoveryv1.EndpointSlice {
	o := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Key.Namespace, Name: s.Key.Name + "-bench",
			Labels:      map[string]string{labelService: s.Key.Name, labelManagedBy: "bench"},
			Annotations: map[string]string{annoTriggerTime: trigger.UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	seen := map[netip.Addr]bool{}
	for _, p := range s.Ports {
		name, proto := p.Name.Port, corev1.Protocol(string(p.Name.Protocol))
		port := int32(p.TargetPort)
		switch {
		case p.AllPorts:
			port = 1
		case p.IsRange():
			port = int32(p.Port)
		}
		o.Ports = append(o.Ports, discoveryv1.EndpointPort{Name: &name, Protocol: &proto, Port: &port})
		for _, ep := range p.Endpoints {
			if seen[ep.Addr] {
				continue
			}
			seen[ep.Addr] = true
			ready, serving, node := ep.Ready, ep.Serving, ep.NodeName
			o.Endpoints = append(o.Endpoints, discoveryv1.Endpoint{Addresses: []string{ep.Addr.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving}, NodeName: &node})
		}
	}
	return o
}

// NodeObject is the workload's node as a Node with its InternalIP.
func (w *Workload) NodeObject() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: w.Node.Name}}
	for _, a := range w.Node.Addresses {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
	}
	return n
}

// Namespaces lists the namespaces the workload's Services live in.
func (w *Workload) Namespaces() []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range w.Services {
		if !seen[s.Key.Namespace] {
			seen[s.Key.Namespace] = true
			out = append(out, s.Key.Namespace)
		}
	}
	return out
}

// WriteManifest writes obj as one JSON document of a multi-document manifest file ("---" first),
// with the kind and apiVersion the typed objects above leave empty and the manifest loader needs.
func WriteManifest(w io.Writer, kind, apiVersion string, obj any) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("encode %s: %w", kind, err)
	}
	_, err = fmt.Fprintf(w, "---\n{\"kind\":%q,\"apiVersion\":%q,%s\n", kind, apiVersion, b[1:])
	return err
}
