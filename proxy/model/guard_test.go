package model

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// The node of the guard tests: its Node object has nodeV4; the kernel also holds nodeV6.
const (
	nodeV4 = "192.0.2.250"
	nodeV6 = "2001:db8::250"
)

func guardTracker(t *testing.T, rec *recorder) *Tracker {
	t.Helper()
	reserved, err := ParsePortSpans(DefaultReservedPorts)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(TrackerConfig{NodeName: "n1", Logger: logr.Discard(), OnRejection: rec.record,
		Guard: GuardConfig{ReservedPorts: reserved, BlockRange: PortSpan{20000, 29999}}})
	tr.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: nodeV4}}}})
	tr.SetLocalAddresses([]netip.Addr{addr(nodeV6), addr("127.0.0.1"), addr("fd00:96::77")})
	rec.take()
	return tr
}

func lbIngress(ips ...string) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		for _, ip := range ips {
			s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
		}
	}
}

func reasonOf(tr *Tracker, name string) string {
	s := tr.Service(keyOf(name))
	switch {
	case s == nil:
		return "<none>"
	case s.Rejected != nil:
		return s.Rejected.Reason
	case s.Withheld != nil:
		return s.Withheld.Reason + " (partial)"
	}
	return "accepted"
}

// TestGuardNodeAddresses: all-ports and ranges can never be programmed on a node address,
// whichever field names it; single ports can, except reserved ones. Each case was accepted
// before the guard (a node takeover).
func TestGuardNodeAddresses(t *testing.T) {
	allPorts := annotate(annotation.AllPortsKey, "true")
	anyPort := withPorts(tcpPort("any", 1, intstr.IntOrString{}))
	wholeRange := func(s *corev1.Service) {
		withPorts(tcpPort("p", 1, intstr.IntOrString{}))(s)
		annotate(annotation.PortRangesKey, "p=1-65535")(s)
	}
	tests := []struct {
		name   string
		svc    *corev1.Service
		reason string
	}{
		{"all-ports on a node LB IPv4", svcFixture("a", anyPort, allPorts, lbIngress(nodeV4)), ReasonNodeAddressRange},
		{"all-ports on a kernel-local LB IPv6", svcFixture("a", anyPort, allPorts, lbIngress(nodeV6),
			func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"fd00:96::10"}; s.Spec.ClusterIP = "fd00:96::10" }), ReasonNodeAddressRange},
		{"all-ports on loopback LB", svcFixture("a", anyPort, allPorts, lbIngress("127.0.0.1")), ReasonSpecialAddress},
		{"range on a node LB IP", svcFixture("a", wholeRange, lbIngress(nodeV4)), ReasonNodeAddressRange},
		{"range on a node external IP", svcFixture("a", wholeRange, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{nodeV4} }), ReasonNodeAddressRange},
		{"cluster IP is a node address", svcFixture("a", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = nodeV4, []string{nodeV4} }),
			ReasonNodeAddressClusterIP},
		{"cluster IP is loopback", svcFixture("a", func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "127.0.0.1", []string{"127.0.0.1"} }),
			ReasonSpecialAddress},
		// The kernel may hold service addresses (kube-proxy IPVS's kube-ipvs0 holds every
		// ClusterIP): a kernel-only address is not a clash for a cluster IP.
		{"cluster IP held by the kernel only", svcFixture("a", func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "fd00:96::77", []string{"fd00:96::77"}
		}), "accepted"},
		{"ssh on a node LB IP", svcFixture("a", withPorts(tcpPort("ssh", 22, intstr.IntOrString{})), lbIngress(nodeV4)), ReasonReservedPort},
		{"kubelet on a node external IP", svcFixture("a", withPorts(tcpPort("k", 10250, intstr.IntOrString{})),
			func(s *corev1.Service) { s.Spec.ExternalIPs = []string{nodeV6} }), ReasonReservedPort},
		{"node port on the kubelet's", svcFixture("a", func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
			s.Spec.Ports[0].NodePort = 10250
		}), ReasonReservedPort},
		{"health-check node port on SSH", svcFixture("a", lbIngress("198.51.100.1"), func(s *corev1.Service) {
			s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			s.Spec.HealthCheckNodePort = 22
		}), ReasonReservedPort},
		{"block over the API server", svcFixture("a", withPorts(tcpPort("b", 6400, intstr.IntOrString{})), func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
		}, annotate(annotation.PortRangesKey, "b=6400-6499", annotation.NodePortRangesKey, "b=6400-6499")), ReasonReservedPort},
		{"block outside the block range", svcFixture("a", withPorts(tcpPort("b", 40000, intstr.IntOrString{})), func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
		}, annotate(annotation.PortRangesKey, "b=40000-40009", annotation.NodePortRangesKey, "b=40000-40009")), ReasonNodePortBlockOutOfRange},
		{"shifted block", svcFixture("a", withPorts(tcpPort("b", 20000, intstr.IntOrString{})), func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
		}, annotate(annotation.PortRangesKey, "b=20000-20009", annotation.NodePortRangesKey, "b=21000-21009")), ReasonNodePortBlockOutOfRange},
		// What keeps working.
		{"single port on a node LB IP (ServiceLB)", svcFixture("a", lbIngress(nodeV4)), "accepted"},
		{"all-ports on an ordinary LB IP", svcFixture("a", anyPort, allPorts, lbIngress("198.51.100.1")), "accepted"},
		{"range on an ordinary external IP", svcFixture("a", wholeRange, func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }), "accepted"},
		{"block in the block range", svcFixture("a", withPorts(tcpPort("b", 20000, intstr.IntOrString{})), func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeNodePort
		}, annotate(annotation.PortRangesKey, "b=20000-20009", annotation.NodePortRangesKey, "b=20000-20009")), "accepted"},
		{"reserved port on a cluster IP only", svcFixture("a", withPorts(tcpPort("ssh", 22, intstr.IntOrString{}))), "accepted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			tr := guardTracker(t, rec)
			tr.UpsertService(tc.svc)
			if got := reasonOf(tr, "a"); got != tc.reason {
				t.Fatalf("got %s (%+v); want %s", got, tr.Service(keyOf("a")).Rejected, tc.reason)
			}
			if r := tr.Service(keyOf("a")).Rejected; r != nil && !strings.HasPrefix(r.Message, "service ns/a: ") {
				t.Fatalf("message %q does not name the Service", r.Message)
			}
		})
	}
}

// TestGuardFollowsNodeAddresses: the guard re-checks the Services concerned when the node's
// addresses change, from the Node object or from the kernel.
func TestGuardFollowsNodeAddresses(t *testing.T) {
	rec := &recorder{}
	tr := guardTracker(t, rec)
	tr.UpsertService(svcFixture("lb", withPorts(tcpPort("any", 1, intstr.IntOrString{})),
		annotate(annotation.AllPortsKey, "true"), lbIngress("198.51.100.7")))
	tr.UpsertService(svcFixture("other", onIP("10.96.0.20", "192.0.2.1")))
	if got := reasonOf(tr, "lb"); got != "accepted" {
		t.Fatalf("before: %s; want accepted", got)
	}
	tr.TakeChanges()
	rec.take()
	// The kernel now holds the LB IP (a VIP moved to this node, or ServiceLB).
	tr.SetLocalAddresses([]netip.Addr{addr(nodeV6), addr("198.51.100.7")})
	if got := reasonOf(tr, "lb"); got != ReasonNodeAddressRange {
		t.Fatalf("after the kernel took the address: %s; want %s", got, ReasonNodeAddressRange)
	}
	if ch := tr.TakeChanges(); !reflect.DeepEqual(ch.Services, []ServiceKey{keyOf("lb")}) {
		t.Fatalf("changes = %v; want only ns/lb rebuilt", ch.Services)
	}
	if got := rec.take(); !reflect.DeepEqual(got, []string{"ns/lb " + ReasonNodeAddressRange}) {
		t.Fatalf("events = %v", got)
	}
	tr.SetLocalAddresses([]netip.Addr{addr(nodeV6)})
	if got := reasonOf(tr, "lb"); got != "accepted" {
		t.Fatalf("after the address left: %s; want accepted", got)
	}
	if want := []netip.Addr{addr(nodeV4), addr(nodeV6)}; !reflect.DeepEqual(tr.NodeAddresses(), want) {
		t.Fatalf("NodeAddresses = %v; want %v", tr.NodeAddresses(), want)
	}
	// Through the Node object too.
	tr.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "198.51.100.7"}}}})
	if got := reasonOf(tr, "lb"); got != ReasonNodeAddressRange {
		t.Fatalf("after the Node object took the address: %s; want %s", got, ReasonNodeAddressRange)
	}
	tr.DeleteNode("n1")
	if got := reasonOf(tr, "lb"); got != "accepted" {
		t.Fatalf("after the Node was deleted: %s; want accepted", got)
	}
}

// TestGuardNodePortShadow: a single port on a node LoadBalancer IP would shadow a node port or a
// health-check node port of the same number: a conflict, the older Service keeps the port, and
// the younger one is served without that port on the node address (its ClusterIP keeps it).
func TestGuardNodePortShadow(t *testing.T) {
	rec := &recorder{}
	tr := guardTracker(t, rec)
	tr.UpsertService(svcFixture("np", created(1), onIP("10.96.0.21", "192.0.2.21"), func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeNodePort
		s.Spec.Ports[0].NodePort = 30080
	}))
	tr.UpsertService(svcFixture("hc", created(2), onIP("10.96.0.22", "192.0.2.22"), lbIngress("198.51.100.22"), func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = 30090
	}))
	tr.UpsertService(svcFixture("lb", created(3), withPorts(tcpPort("web", 30080, intstr.IntOrString{})), lbIngress(nodeV4)))
	tr.UpsertService(svcFixture("lb2", created(4), withPorts(tcpPort("web", 30090, intstr.IntOrString{})), lbIngress(nodeV4),
		func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.24", []string{"10.96.0.24"} }))
	partial := ReasonServiceConflict + " (partial)"
	for name, want := range map[string]string{"np": "accepted", "hc": "accepted", "lb": partial, "lb2": partial} {
		if got := reasonOf(tr, name); got != want {
			t.Errorf("%s: %s; want %s", name, got, want)
		}
	}
	lb := tr.Service(keyOf("lb"))
	if msg := lb.Withheld.Message; !strings.Contains(msg, "on node address "+nodeV4) || !strings.Contains(msg, "ns/np") {
		t.Errorf("message %q should name the node address and the node port's Service", msg)
	}
	if p := lb.Ports[0]; len(p.LoadBalancerIPs) != 0 || !reflect.DeepEqual(p.ClusterIPs, []netip.Addr{addr("10.96.0.10")}) {
		t.Errorf("lb's port: LoadBalancerIPs %v, ClusterIPs %v; want no LoadBalancer IP and its ClusterIP kept", p.LoadBalancerIPs, p.ClusterIPs)
	}
	// The node-port Service goes away: the LB port on the node address is served again.
	tr.DeleteService(keyOf("np"))
	if got := reasonOf(tr, "lb"); got != "accepted" {
		t.Fatalf("after the node-port Service left: %s; want accepted", got)
	}
}

// TestOneValuePortRangeEndpoints (finding 3): a one-port range keeps the destination port like
// any range, so its endpoints resolve without a port and the port says so.
func TestOneValuePortRangeEndpoints(t *testing.T) {
	svc := svcFixture("sip", withPorts(corev1.ServicePort{Name: "sip", Protocol: corev1.ProtocolUDP, Port: 5060}),
		annotate(annotation.PortRangesKey, "sip=5060-5060"))
	sl := sliceFixture("sip-1", "sip", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{{Name: ptr("sip"), Port: ptr(int32(5060)), Protocol: ptr(corev1.ProtocolUDP)}},
		epFixture{addr: "10.244.0.5"})
	conv := FromService(svc, []*discoveryv1.EndpointSlice{sl})
	if conv.Service == nil || conv.Service.Rejected != nil || len(conv.Service.Ports) != 1 {
		t.Fatalf("FromService = %+v; want one accepted port", conv.Service)
	}
	p := conv.Service.Ports[0]
	if !p.KeepsPort() || p.IsRange() || len(p.Endpoints) != 1 || p.Endpoints[0].Port != 0 {
		t.Fatalf("port = %+v; want KeepsPort, not a range, one endpoint with port 0", p)
	}
}

// TestSourceRangesTrimmed (finding 8): entries padded with spaces are trimmed as the API server
// and upstream do, instead of rejecting the Service.
func TestSourceRangesTrimmed(t *testing.T) {
	conv := FromService(svcFixture("a", lbIngress("198.51.100.1"), func(s *corev1.Service) {
		s.Spec.LoadBalancerSourceRanges = []string{" 10.0.0.0/8 ", "\t192.0.2.0/24"}
	}), nil)
	if conv.Service == nil || conv.Service.Rejected != nil {
		t.Fatalf("FromService = %+v; want accepted", conv.Service)
	}
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.0/24")}
	if got := conv.Service.Ports[0].LoadBalancerSourceRanges; !reflect.DeepEqual(got, want) {
		t.Fatalf("source ranges = %v; want %v", got, want)
	}
}

func TestParsePortSpans(t *testing.T) {
	got, err := ParsePortSpans(" 10248-10259, 22 ,6443")
	if err != nil {
		t.Fatal(err)
	}
	if s := FormatPortSpans(got); s != "22,6443,10248-10259" {
		t.Fatalf("got %s", s)
	}
	// An entry of spaces is no entry, as an empty one is ("22, " in a flag or a config file).
	for _, in := range []string{"22, ", "22, ,", " , 22"} {
		got, err := ParsePortSpans(in)
		if err != nil || FormatPortSpans(got) != "22" {
			t.Errorf("ParsePortSpans(%q) = %v, %v; want 22", in, got, err)
		}
	}
	for _, bad := range []string{"0", "x", "10-5", "70000", "1-2-3"} {
		if _, err := ParsePortSpans(bad); err == nil {
			t.Errorf("ParsePortSpans(%q): no error", bad)
		}
	}
}
