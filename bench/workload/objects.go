package workload

import (
	"bufio"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/fixture"
)

// Annotations and labels the API objects carry (nftproxy's and Kubernetes' own names).
const (
	annoPortRanges  = "nftproxy.io/port-ranges"
	annoAllPorts    = "nftproxy.io/all-ports"
	labelManagedBy  = "endpointslice.kubernetes.io/managed-by"
	annoTriggerTime = "endpoints.kubernetes.io/last-change-trigger-time"
)

// APINodePortOffset moves non-TCP node ports of the API objects clear of the TCP ones.
const APINodePortOffset = 15000

// reservedClusterIP is the address the API server gives the default/kubernetes Service; the
// Service that would get it in the model gets spareClusterIP, the range's last address, which no
// other workload Service has (they count up from 198.19.0.1, 65,000 at most). Not any address:
// the API server takes a dynamic one from the same upper part of the range that a large
// workload's fixed addresses reach, and one did (at the 26,7xxth Service of 30k, twice).
var (
	reservedClusterIP = netip.MustParseAddr("198.19.0.1")
	spareClusterIP    = netip.MustParseAddr("198.19.255.254")
)

// Fixture is s as the shared test fixture describes it: NodePort when a port has a node port,
// ClusterIP otherwise; port ranges and all-ports through nftproxy's annotations (a peer that
// does not know them programs the first port only, as upstream kube-proxy would). Its one
// EndpointSlice lists every endpoint once, with the trigger-time annotation the EndpointSlice
// controller sets (peers compute their network programming latency from it).
func Fixture(s *model.Service, trigger time.Time) fixture.Service {
	f := fixture.Service{Name: s.Key.Name, Namespace: s.Key.Namespace, Type: corev1.ServiceTypeClusterIP,
		Endpoints:        []fixture.Endpoint{},
		SliceLabels:      map[string]string{labelManagedBy: "bench"},
		SliceAnnotations: map[string]string{annoTriggerTime: trigger.UTC().Format(time.RFC3339Nano)}}
	var ranges []string
	seen := map[netip.Addr]bool{}
	for _, p := range s.Ports {
		if len(p.ClusterIPs) > 0 {
			ip := p.ClusterIPs[0]
			if ip == reservedClusterIP {
				ip = spareClusterIP
			}
			f.ClusterIPs = []netip.Addr{ip}
		}
		port := fixture.Port{Name: p.Name.Port, Protocol: corev1.Protocol(string(p.Name.Protocol)), Port: int32(p.Port)}
		switch {
		case p.AllPorts:
			port.Port = 1
			f.Annotations = map[string]string{annoAllPorts: "true"}
		case p.IsRange():
			ranges = append(ranges, fmt.Sprintf("%s=%d-%d", p.Name.Port, p.Port, p.PortEnd))
		default:
			port.Target = int32(p.TargetPort)
		}
		if p.NodePort != 0 {
			f.Type = corev1.ServiceTypeNodePort
			port.NodePort = int32(p.NodePort)
			if p.Name.Protocol != model.TCP {
				// The API server's node-port allocator ignores the protocol; the model
				// numbers each protocol from FirstNodePort.
				port.NodePort += APINodePortOffset
			}
		}
		f.Ports = append(f.Ports, port)
		for _, ep := range p.Endpoints {
			if seen[ep.Addr] {
				continue
			}
			seen[ep.Addr] = true
			ready, serving := ep.Ready, ep.Serving
			f.Endpoints = append(f.Endpoints, fixture.Endpoint{Addr: ep.Addr, Node: ep.NodeName(), Ready: &ready, Serving: &serving})
		}
	}
	if len(ranges) > 0 {
		f.Annotations = map[string]string{annoPortRanges: strings.Join(ranges, ",")}
	}
	return f
}

// ServiceObject is s as a Kubernetes Service (see Fixture).
func ServiceObject(s *model.Service) *corev1.Service { return Fixture(s, time.Time{}).Object() }

// SliceObject is the EndpointSlice of s (see Fixture), stamped with trigger.
func SliceObject(s *model.Service, trigger time.Time) *discoveryv1.EndpointSlice {
	return Fixture(s, trigger).Slices()[0]
}

// NodeObject is the workload's node as a Node with its InternalIP.
func (w *Workload) NodeObject() *corev1.Node {
	n := fixture.Node{Name: w.Node.Name}
	for _, a := range w.Node.Addresses {
		n.Addresses = append(n.Addresses, a.String())
	}
	return n.Object()
}

// WriteManifest writes the workload as manifest mode reads it: the Node, then each Service and
// its EndpointSlice, as JSON documents (bench/cmd/manifests, bench/cmd/heap). The slices carry a
// fixed trigger time, so the same workload writes the same bytes.
func (w *Workload) WriteManifest(out io.Writer) error {
	bw := bufio.NewWriter(out)
	if err := fixture.Write(bw, w.NodeObject()); err != nil {
		return err
	}
	trigger := time.Unix(1_800_000_000, 0)
	for _, s := range w.Services {
		if err := fixture.Write(bw, ServiceObject(s), SliceObject(s, trigger)); err != nil {
			return fmt.Errorf("write Service %s: %w", s.Key, err)
		}
	}
	return bw.Flush()
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
