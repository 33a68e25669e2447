package soak

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/nftproxy/nftproxy/test/lab"
)

// nodeName is the Node every scenario's daemon runs as; its addresses are the lab's primary
// node IPs, so node ports answer there.
const nodeName = "node-a"

// service is a compact Service with its endpoints, written as manifests by files. Fields map to
// the Kubernetes fields of the same name.
type service struct {
	name, namespace string // namespace default "default"
	typ             string // ClusterIP (default), NodePort, LoadBalancer
	clusterIPs      []netip.Addr
	ports           []servicePort
	annotations     map[string]string
	externalIPs     []netip.Addr
	lbIPs           []netip.Addr
	// affinity is sessionAffinity ClientIP (the port then has chains and sets of its own).
	affinity bool
	// endpoints are the ready endpoint addresses; one EndpointSlice per family present. nil
	// means no EndpointSlice at all.
	endpoints []netip.Addr
}

// servicePort is one entry of spec.ports; target 0 means the same as port.
type servicePort struct {
	name     string
	proto    string // TCP, UDP
	port     int
	target   int
	nodePort int
}

func (s service) ns() string {
	if s.namespace == "" {
		return "default"
	}
	return s.namespace
}

// key is how the daemon's comments start for this Service: "namespace/name/".
func (s service) key() string { return s.ns() + "/" + s.name + "/" }

// serviceFile and sliceFile are the file names of the Service and of its EndpointSlices: apart,
// so the churn can rewrite endpoints without touching the Service.
func (s service) serviceFile() string { return "svc-" + s.ns() + "-" + s.name + ".yaml" }
func (s service) sliceFile() string   { return "eps-" + s.ns() + "-" + s.name + ".yaml" }

// pods are the IPv4 and IPv6 addresses of lab pods n..., for service.endpoints.
func pods(ns ...int) []netip.Addr {
	var out []netip.Addr
	for _, n := range ns {
		out = append(out, lab.PodIPv4(n), lab.PodIPv6(n))
	}
	return out
}

func (s service) serviceYAML() string {
	typ := s.typ
	if typ == "" {
		typ = "ClusterIP"
	}
	var ports []any
	for _, p := range s.ports {
		t := p.target
		if t == 0 {
			t = p.port
		}
		m := map[string]any{"name": p.name, "protocol": p.proto, "port": p.port, "targetPort": t}
		if p.nodePort != 0 {
			m["nodePort"] = p.nodePort
		}
		ports = append(ports, m)
	}
	fams := families(s.clusterIPs)
	policy := "SingleStack"
	if len(fams) > 1 {
		policy = "PreferDualStack"
	}
	spec := map[string]any{"type": typ, "clusterIP": s.clusterIPs[0].String(), "clusterIPs": strs(s.clusterIPs),
		"ipFamilies": fams, "ipFamilyPolicy": policy, "selector": map[string]string{"app": s.name}, "ports": ports}
	if len(s.externalIPs) > 0 {
		spec["externalIPs"] = strs(s.externalIPs)
	}
	if s.affinity {
		spec["sessionAffinity"] = "ClientIP"
	}
	if typ == "LoadBalancer" && s.annotations["nftproxy.io/all-ports"] == "true" {
		spec["allocateLoadBalancerNodePorts"] = false
	}
	meta := map[string]any{"name": s.name, "namespace": s.ns()}
	if len(s.annotations) > 0 {
		meta["annotations"] = s.annotations
	}
	obj := map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}
	if len(s.lbIPs) > 0 {
		var ing []any
		for _, a := range s.lbIPs {
			ing = append(ing, map[string]string{"ip": a.String()})
		}
		obj["status"] = map[string]any{"loadBalancer": map[string]any{"ingress": ing}}
	}
	return yamlDocs(obj)
}

// slicesYAML is the Service's EndpointSlices, one per family of its endpoints; version is
// written into a label so two generations of the same endpoints still differ as files.
func (s service) slicesYAML(version int) string {
	var docs []any
	for _, fam := range families(s.endpoints) {
		var ports []any
		for _, p := range s.ports {
			t := p.target
			if t == 0 {
				t = p.port
			}
			ports = append(ports, map[string]any{"name": p.name, "protocol": p.proto, "port": t})
		}
		var eps []any
		for _, a := range s.endpoints {
			if (fam == "IPv6") != a.Is6() {
				continue
			}
			eps = append(eps, map[string]any{"addresses": []string{a.String()},
				"conditions": map[string]bool{"ready": true}, "nodeName": nodeName})
		}
		docs = append(docs, map[string]any{
			"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
			"metadata": map[string]any{"name": s.name + "-" + strings.ToLower(fam), "namespace": s.ns(),
				"labels": map[string]string{"kubernetes.io/service-name": s.name, "soak.nftproxy.io/version": fmt.Sprint(version)}},
			"addressType": fam, "ports": ports, "endpoints": eps,
		})
	}
	return yamlDocs(docs...)
}

// nodeYAML is the Node the daemon runs as, with the lab's primary addresses.
func nodeYAML() string {
	return yamlDocs(map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": nodeName},
		"status": map[string]any{"addresses": []any{
			map[string]string{"type": "InternalIP", "address": lab.NodeIPv4},
			map[string]string{"type": "InternalIP", "address": lab.NodeIPv6},
		}}})
}

func families(addrs []netip.Addr) []string {
	var out []string
	v4, v6 := false, false
	for _, a := range addrs {
		if a.Is6() {
			v6 = true
		} else {
			v4 = true
		}
	}
	if v4 {
		out = append(out, "IPv4")
	}
	if v6 {
		out = append(out, "IPv6")
	}
	return out
}

func strs(addrs []netip.Addr) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out
}

// yamlDocs writes each object as one JSON document (JSON is YAML) of a multi-document file.
func yamlDocs(docs ...any) string {
	var b strings.Builder
	for _, d := range docs {
		j, err := json.Marshal(d)
		if err != nil {
			panic(fmt.Sprintf("soak: manifest does not marshal: %v", err)) // a bug in the test
		}
		b.WriteString("---\n")
		b.Write(j)
		b.WriteString("\n")
	}
	return b.String()
}

// serviceAddr is ClusterIP number n of the service CIDR 198.19.0.0/18 for scenarios with more
// Services than lab.ClusterIPv4 numbers (n from 1 to 16382): 198.19.(n/256).(n%256), skipping
// nothing but .0 of the first block.
func serviceAddr(n int) netip.Addr {
	if n < 1 || n > 16382 {
		panic(fmt.Sprintf("soak: service address index %d outside 1..16382", n))
	}
	return netip.AddrFrom4([4]byte{198, 19, byte(n / 256), byte(n % 256)})
}
