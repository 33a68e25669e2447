package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/nftproxy/nftproxy/test/lab"
)

// nodeName is the Node the daemon runs as; its addresses are the lab's primary node IPs.
const nodeName = "node-a"

// service is a compact description of one Service and its endpoints, turned into manifests by
// manifests. Every field maps to the Kubernetes field of the same name.
type service struct {
	name       string
	namespace  string // default "default"
	typ        string // ClusterIP (default), NodePort, LoadBalancer
	clusterIPs []netip.Addr
	ports      []servicePort
	// annotations are the Service's annotations (port ranges, all-ports).
	annotations map[string]string
	externalIPs []netip.Addr
	lbIPs       []netip.Addr
	// sourceRanges are spec.loadBalancerSourceRanges, written as given (spaces included).
	sourceRanges []string
	// pods are the ready endpoints, by lab pod number; one EndpointSlice per family of
	// clusterIPs. Nil means no EndpointSlice at all.
	pods []int
}

// servicePort is one entry of spec.ports; target 0 means the same as port.
type servicePort struct {
	name     string
	proto    string // TCP, UDP, SCTP
	port     uint16
	target   uint16
	nodePort uint16
}

func (s service) ns() string {
	if s.namespace == "" {
		return "default"
	}
	return s.namespace
}

// key is how the daemon names the Service in comments: "namespace/name/".
func (s service) key() string { return s.ns() + "/" + s.name + "/" }

func (p servicePort) targetPort() uint16 {
	if p.target == 0 {
		return p.port
	}
	return p.target
}

// manifests renders the Service and its EndpointSlices as a multi-document YAML file. Each
// document is JSON, which is YAML, so no YAML library is needed to write it.
func (s service) manifests() string {
	var docs []any
	docs = append(docs, s.serviceObject())
	for _, fam := range families(s.clusterIPs) {
		if s.pods != nil {
			docs = append(docs, s.endpointSlice(fam))
		}
	}
	return yamlDocs(docs...)
}

func (s service) serviceObject() map[string]any {
	typ := s.typ
	if typ == "" {
		typ = "ClusterIP"
	}
	var ports []any
	for _, p := range s.ports {
		m := map[string]any{"name": p.name, "protocol": p.proto, "port": p.port, "targetPort": p.targetPort()}
		if p.nodePort != 0 {
			m["nodePort"] = p.nodePort
		}
		ports = append(ports, m)
	}
	var ipFams []string
	for _, f := range families(s.clusterIPs) {
		ipFams = append(ipFams, f)
	}
	policy := "SingleStack"
	if len(ipFams) > 1 {
		policy = "PreferDualStack"
	}
	spec := map[string]any{
		"type":           typ,
		"clusterIP":      s.clusterIPs[0].String(),
		"clusterIPs":     addrStrings(s.clusterIPs),
		"ipFamilies":     ipFams,
		"ipFamilyPolicy": policy,
		"selector":       map[string]string{"app": s.name},
		"ports":          ports,
	}
	if len(s.externalIPs) > 0 {
		spec["externalIPs"] = addrStrings(s.externalIPs)
	}
	if len(s.sourceRanges) > 0 {
		spec["loadBalancerSourceRanges"] = s.sourceRanges
	}
	if typ == "LoadBalancer" && s.annotations["nftproxy.io/all-ports"] == "true" {
		spec["allocateLoadBalancerNodePorts"] = false
	}
	obj := map[string]any{
		"apiVersion": "v1",
		"kind":       "Service",
		"metadata":   map[string]any{"name": s.name, "namespace": s.ns(), "annotations": s.annotations},
		"spec":       spec,
	}
	if len(s.lbIPs) > 0 {
		var ingress []any
		for _, a := range s.lbIPs {
			ingress = append(ingress, map[string]string{"ip": a.String()})
		}
		obj["status"] = map[string]any{"loadBalancer": map[string]any{"ingress": ingress}}
	}
	return obj
}

// endpointSlice lists s.pods' addresses of family fam ("IPv4" or "IPv6"), ready, on this node.
func (s service) endpointSlice(fam string) map[string]any {
	var ports []any
	for _, p := range s.ports {
		ports = append(ports, map[string]any{"name": p.name, "protocol": p.proto, "port": p.targetPort()})
	}
	var eps []any
	for _, n := range s.pods {
		a := lab.PodIPv4(n)
		if fam == "IPv6" {
			a = lab.PodIPv6(n)
		}
		eps = append(eps, map[string]any{
			"addresses":  []string{a.String()},
			"conditions": map[string]bool{"ready": true},
			"nodeName":   nodeName,
		})
	}
	return map[string]any{
		"apiVersion": "discovery.k8s.io/v1",
		"kind":       "EndpointSlice",
		"metadata": map[string]any{
			"name":      s.name + "-" + strings.ToLower(fam),
			"namespace": s.ns(),
			"labels":    map[string]string{"kubernetes.io/service-name": s.name},
		},
		"addressType": fam,
		"ports":       ports,
		"endpoints":   eps,
	}
}

// nodeManifest is the Node the daemon runs as, with the lab's primary node addresses.
func nodeManifest() string {
	return yamlDocs(map[string]any{
		"apiVersion": "v1",
		"kind":       "Node",
		"metadata":   map[string]any{"name": nodeName},
		"status": map[string]any{"addresses": []any{
			map[string]string{"type": "InternalIP", "address": lab.NodeIPv4},
			map[string]string{"type": "InternalIP", "address": lab.NodeIPv6},
		}},
	})
}

func families(addrs []netip.Addr) []string {
	var out []string
	seen := map[string]bool{}
	for _, a := range addrs {
		f := "IPv4"
		if a.Is6() {
			f = "IPv6"
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

func addrStrings(addrs []netip.Addr) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out
}

func yamlDocs(docs ...any) string {
	var b strings.Builder
	for _, d := range docs {
		j, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			panic(fmt.Sprintf("e2e: manifest does not marshal: %v", err)) // a bug in the test
		}
		b.WriteString("---\n")
		b.Write(j)
		b.WriteString("\n")
	}
	return b.String()
}
