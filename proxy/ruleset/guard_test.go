package ruleset

import (
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// guardedRuleset feeds Services with one endpoint each (pod1, on the ports of their spec) through
// a Tracker guarding node-a (nodeIP from its Node object, nodeBridge from the kernel) and builds
// the IPv4 ruleset, as the daemon does.
func guardedRuleset(t *testing.T, svcs ...*corev1.Service) *tracer {
	t.Helper()
	reserved, err := model.ParsePortSpans(model.DefaultReservedPorts)
	if err != nil {
		t.Fatal(err)
	}
	tr := model.NewTracker(model.TrackerConfig{NodeName: thisNode, Logger: logr.Discard(),
		Guard: model.GuardConfig{ReservedPorts: reserved, BlockRange: model.PortSpan{First: 20000, Last: 29999}}})
	tr.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: thisNode},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeIP}}}})
	tr.SetLocalAddresses(addrs(nodeIP, nodeBridge, "127.0.0.1"))
	for _, s := range svcs {
		tr.UpsertService(s)
		var ports []discoveryv1.EndpointPort
		for _, p := range s.Spec.Ports {
			ports = append(ports, discoveryv1.EndpointPort{Name: ptrTo(p.Name), Port: ptrTo(p.Port), Protocol: ptrTo(p.Protocol)})
		}
		tr.UpsertEndpointSlice(&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: s.Name}},
			AddressType: discoveryv1.AddressTypeIPv4, Ports: ports,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{pod1}, NodeName: ptrTo(thisNode)}},
		})
	}
	snap := tr.Snapshot()
	return newTracer(t, policyBuilder(t).Ruleset(snap.Node, snap.Sorted()), nodeIP, nodeBridge, "127.0.0.1")
}

func ptrTo[T any](v T) *T { return &v }

func guardSvc(name, clusterIP string, ports []corev1.ServicePort, mods ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: name, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, Ports: ports}}
	for _, m := range mods {
		m(s)
	}
	return s
}

func ingress(ip string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
	}
}

// TestNodeNotTakenOver: an all-ports LoadBalancer whose ingress IP is the node's own address, and a
// whole-port-space range on an external IP that is the node's address, must not capture the node:
// a TCP packet to node:22 is not forwarded, from outside or from the node itself. A single port
// on the node's address (ServiceLB) still is.
func TestNodeNotTakenOver(t *testing.T) {
	tcpPort := func(name string, p int32) corev1.ServicePort {
		return corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: p}
	}
	takeover := guardSvc("takeover", "198.19.0.30", []corev1.ServicePort{tcpPort("any", 1)}, ingress(nodeIP),
		func(s *corev1.Service) { s.Annotations[annotation.AllPortsKey] = "true" })
	rangeExt := guardSvc("range", "198.19.0.31", []corev1.ServicePort{tcpPort("p", 1)},
		func(s *corev1.Service) {
			s.Spec.ExternalIPs = []string{nodeBridge}
			s.Annotations[annotation.PortRangesKey] = "p=1-65535"
		})
	serviceLB := guardSvc("servicelb", "198.19.0.32", []corev1.ServicePort{tcpPort("http", 8088)}, ingress(nodeIP))
	tr := guardedRuleset(t, takeover, rangeExt, serviceLB)
	notForwarded := outcome{"accept", nil, false}
	runTraces(t, tr, []traceCase{
		{"outside client to node:22", tcp(client, nodeIP, 22), notForwarded},
		{"outside client to node:10250", tcp(client, nodeIP, 10250), notForwarded},
		{"the node's own traffic to node:22", local(tcp(nodeIP, nodeIP, 22)), notForwarded},
		{"outside client to the bridge address:22", tcp(client, nodeBridge, 22), notForwarded},
		{"ServiceLB single port on the node address", tcp(client, nodeIP, 8088), outcome{"accept", []string{pod1 + ":8088"}, true}},
	})
}

// TestOneValueRange (finding 3): "sip=5060-5060" is a valid one-port range; its endpoint must be
// used (it was dropped: the model resolved it without a port and the builder wanted one).
func TestOneValueRange(t *testing.T) {
	sip := guardSvc("sip", "198.19.0.33", []corev1.ServicePort{{Name: "sip", Protocol: corev1.ProtocolUDP, Port: 5060}},
		func(s *corev1.Service) { s.Annotations[annotation.PortRangesKey] = "sip=5060-5060" })
	tr := guardedRuleset(t, sip)
	runTraces(t, tr, []traceCase{
		{"ClusterIP:5060 reaches the pod on 5060", udp(pod2, "198.19.0.33", 5060), outcome{"accept", []string{pod1}, false}},
	})
}
