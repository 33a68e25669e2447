package e2e

import (
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// KEP-2610's shapes of an all-ports Service: no ports at all, and EndpointSlices without ports.
// Each Service has a ClusterIP of its own in 80..89.

// allPortsProbes picks n distinct random probe ports and the lab port specs that make the pods
// listen on them.
func allPortsProbes(t *testing.T, n int) ([]uint16, []lab.PortSpec) {
	t.Helper()
	ports := allPortsProbePorts(n)
	t.Logf("probe ports: %v", ports)
	specs := make([]lab.PortSpec, 0, n)
	for _, p := range ports {
		specs = append(specs, lab.Port(p))
	}
	return ports, specs
}

// allPortsProbePorts picks n distinct random ports below the clients' ephemeral range.
func allPortsProbePorts(n int) []uint16 {
	var out []uint16
	for len(out) < n {
		p := uint16(1024 + rand.IntN(32767-1024))
		if !containsPort(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func containsPort(ps []uint16, p uint16) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// writeSliceWithPorts writes one IPv4 EndpointSlice of s whose ports field is ports (nil writes
// `ports: null`, an empty list), next to s's own manifest, which must have Endpoints nil.
func (e *env) writeSliceWithPorts(s fixture.Service, name string, pods []int, ports []discoveryv1.EndpointPort) {
	e.t.Helper()
	withPods := s
	withPods.Endpoints = fixture.Pods(pods...)
	slice := withPods.Slices()[0]
	slice.Name = name
	slice.Ports = ports
	e.writeFile(s.NS()+"-"+name+".yaml", fixture.YAML(slice))
}

// TestAllPortsWithoutPorts: an all-ports Service that lists no ports at all,
// as KEP-2610 has it, forwards every port of TCP, UDP and SCTP on its ClusterIP to the pod on the
// same port. Its EndpointSlice has no ports either (item 2). The API server requires ports, so
// manifest mode is where this shape exists; it used to be refused, then programmed as nothing.
func TestAllPortsWithoutPorts(t *testing.T) {
	t.Parallel()
	probePorts, specs := allPortsProbes(t, 2)
	svc := fixture.Service{Name: "noports", ClusterIPs: []netip.Addr{lab.ClusterIPv4(80)},
		Annotations: map[string]string{annotation.AllPortsKey: "true"}, Endpoints: fixture.Pods(1)}
	e := newEnv(t, lab.Options{Pods: 1, Ports: specs}, svc)
	e.start(svc)
	rs := e.ruleset()
	for _, proto := range []string{"tcp", "udp", "sctp"} {
		if !strings.Contains(rs, `"default/noports/`+proto+`/all"`) {
			t.Errorf("ruleset has no all-ports entry for %s:\n%s", proto, rs)
		}
	}
	masq := netip.MustParseAddr(lab.PodGatewayV4)
	c := e.lab.Client(1)
	for _, p := range probePorts {
		for _, network := range []string{"tcp", "udp"} {
			replied(podNames(1), p, masq).check(t, network+" clusterIP", c.Dial(e.ctx, network, hostPort(lab.ClusterIPv4(80), p)))
		}
	}

	// SCTP: this kernel has no SCTP sockets, so an INIT is sent raw and watched for at the pod.
	pod, err := rawSCTP(e.lab.Pod(1).NS, lab.PodIPv4(1))
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	client, err := rawSCTP(c.NS, lab.ClientIPv4(1))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	const tag = 0x5c7a0001
	port := probePorts[0]
	if _, err := client.WriteToIP(sctpInit(40000, port, tag), &net.IPAddr{IP: lab.ClusterIPv4(80).AsSlice()}); err != nil {
		t.Fatal(err)
	}
	got, ok, err := awaitInit(pod, tag, 2*time.Second)
	switch {
	case err != nil:
		t.Fatal(err)
	case !ok:
		t.Errorf("SCTP INIT to the ClusterIP port %d: nothing reached pod-1", port)
	case got.dstPort != port || got.from != masq:
		t.Errorf("SCTP INIT to the ClusterIP port %d: pod-1 got %v, want it on port %d from %s", port, got, port, masq)
	}
}

// TestAllPortsSlicesWithoutPorts: the EndpointSlice of an all-ports Service
// whose ports list is empty (KEP-2610's design), or whose port entry has no port number (the
// EndpointSlice API's "all ports"), gives the Service its endpoints. The empty list used to
// give none, so traffic was refused.
func TestAllPortsSlicesWithoutPorts(t *testing.T) {
	t.Parallel()
	probePorts, specs := allPortsProbes(t, 2)
	anyPorts := []fixture.Port{{Name: "tcp", Protocol: "TCP", Port: 1}, {Name: "udp", Protocol: "UDP", Port: 1}}
	empty := fixture.Service{Name: "empty-slice", ClusterIPs: []netip.Addr{lab.ClusterIPv4(81)}, Ports: anyPorts,
		Annotations: map[string]string{annotation.AllPortsKey: "true"}}
	unset := fixture.Service{Name: "unset-port", ClusterIPs: []netip.Addr{lab.ClusterIPv4(82)}, Ports: anyPorts,
		Annotations: map[string]string{annotation.AllPortsKey: "true"}}
	e := newEnv(t, lab.Options{Pods: 2, Ports: specs}, empty, unset)
	e.writeSliceWithPorts(empty, "empty-slice-1", []int{1}, nil)
	e.writeSliceWithPorts(unset, "unset-port-1", []int{2}, []discoveryv1.EndpointPort{{Protocol: ptr(corev1.ProtocolTCP)}, {Protocol: ptr(corev1.ProtocolUDP)}})
	e.start(empty, unset)
	masq := netip.MustParseAddr(lab.PodGatewayV4)
	c := e.lab.Client(1)
	for _, p := range probePorts {
		for _, network := range []string{"tcp", "udp"} {
			replied(podNames(1), p, masq).check(t, network+" empty slice", c.Dial(e.ctx, network, hostPort(lab.ClusterIPv4(81), p)))
			replied(podNames(2), p, masq).check(t, network+" port without number", c.Dial(e.ctx, network, hostPort(lab.ClusterIPv4(82), p)))
		}
	}
}

func ptr[T any](v T) *T { return &v }
