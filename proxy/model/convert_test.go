package model

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

func TestFromServiceRejections(t *testing.T) {
	rangePorts := withPorts(tcpPort("rtp", 16384, intstr.IntOrString{}), tcpPort("sip", 5060, intstr.FromInt32(5060)))
	tests := []struct {
		name    string
		svc     *corev1.Service
		reason  string
		inMsg   string
		ignored Ignored
	}{
		{name: "end before start", svc: svcFixture("a", rangePorts, annotate(annotation.PortRangesKey, "rtp=16384-1000")),
			reason: ReasonRangeEndBeforeStart, inMsg: `service ns/a: annotation nftproxy.io/port-ranges: entry 0 "rtp=16384-1000": end before start`},
		{name: "end too large", svc: svcFixture("a", rangePorts, annotate(annotation.PortRangesKey, "rtp=16384-65536")),
			reason: ReasonRangeEndTooLarge},
		{name: "syntax", svc: svcFixture("a", rangePorts, annotate(annotation.PortRangesKey, "rtp=x-1")),
			reason: ReasonAnnotationSyntax, inMsg: "not a number"},
		{name: "start mismatch", svc: svcFixture("a", rangePorts, annotate(annotation.PortRangesKey, "rtp=16385-16400")),
			reason: ReasonRangeStartMismatch, inMsg: "must start at the port"},
		{name: "unknown name", svc: svcFixture("a", rangePorts, annotate(annotation.PortRangesKey, "rpt=16384-16400")),
			reason: ReasonUnknownPortName, inMsg: `names port "rpt"`},
		// The message lists the names the entry may use.
		{name: "unknown name lists ports", svc: svcFixture("a", rangePorts, annotate(annotation.PortRangesKey, "rpt=16384-16400")),
			reason: ReasonUnknownPortName, inMsg: `(ports: "rtp", "sip")`},
		{name: "target remap", svc: svcFixture("a", withPorts(tcpPort("rtp", 16384, intstr.FromInt32(20000))),
			annotate(annotation.PortRangesKey, "rtp=16384-16400")), reason: ReasonTargetPortRemap},
		{name: "named target on range", svc: svcFixture("a", withPorts(tcpPort("rtp", 16384, intstr.FromString("rtp"))),
			annotate(annotation.PortRangesKey, "rtp=16384-16400")), reason: ReasonTargetPortRemap},
		{name: "overlap", svc: svcFixture("a", withPorts(tcpPort("rtp", 5000, intstr.IntOrString{}), tcpPort("sip", 5060, intstr.IntOrString{})),
			annotate(annotation.PortRangesKey, "rtp=5000-5100")), reason: ReasonPortOverlap, inMsg: `port "rtp" (TCP 5000-5100) overlaps port "sip" (TCP 5060)`},
		// A manifest has no API server to refuse a node port given twice.
		{name: "node port overlap", svc: svcFixture("a", withPorts(
			corev1.ServicePort{Name: "a", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080},
			corev1.ServicePort{Name: "b", Protocol: corev1.ProtocolTCP, Port: 81, NodePort: 30080}),
			func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }),
			reason: ReasonPortOverlap, inMsg: `node port "a" (TCP 30080) overlaps node port "b" (TCP 30080)`},
		{name: "all-ports bad bool", svc: svcFixture("a", annotate(annotation.AllPortsKey, "yes")), reason: ReasonAnnotationSyntax},
		{name: "all-ports nodeport", svc: svcFixture("a", annotate(annotation.AllPortsKey, "true"),
			func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort }), reason: ReasonAllPortsNodePort},
		{name: "all-ports headless", svc: svcFixture("a", annotate(annotation.AllPortsKey, "true"),
			func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }), reason: ReasonAllPortsHeadless},
		{name: "all-ports external IPs", svc: svcFixture("a", annotate(annotation.AllPortsKey, "true"),
			func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1"} }), reason: ReasonAllPortsExternalIPs},
		{name: "all-ports with ranges", svc: svcFixture("a", annotate(annotation.AllPortsKey, "true", annotation.PortRangesKey, "http=80-90")),
			reason: ReasonAllPortsWithRanges},
		{name: "all-ports remap", svc: svcFixture("a", annotate(annotation.AllPortsKey, "true")), reason: ReasonTargetPortRemap},
		// Never silent: without all-ports, a Service without ports is refused, not accepted empty.
		{name: "no ports", svc: svcFixture("a", withPorts()), reason: ReasonInvalidPort, inMsg: "spec.ports is empty"},
		{name: "no ports, all-ports false", svc: svcFixture("a", withPorts(), annotate(annotation.AllPortsKey, "false")),
			reason: ReasonInvalidPort},
		{name: "node range width", svc: svcFixture("a", rangePorts, annotate(annotation.PortRangesKey, "rtp=16384-16483",
			annotation.NodePortRangesKey, "rtp=40100-40198")), reason: ReasonNodePortRangeWidth, inMsg: "99 ports wide"},
		{name: "node range unknown", svc: svcFixture("a", rangePorts, annotate(annotation.PortRangesKey, "rtp=16384-16483",
			annotation.NodePortRangesKey, "sip=40100-40100")), reason: ReasonNodePortRangeUnknownName},
		{name: "bad cluster IP", svc: svcFixture("a", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.300"} }),
			reason: ReasonInvalidAddress},
		{name: "bad source range", svc: svcFixture("a", func(s *corev1.Service) { s.Spec.LoadBalancerSourceRanges = []string{"1.2.3.4"} }),
			reason: ReasonInvalidAddress},
		{name: "bad protocol", svc: svcFixture("a", withPorts(corev1.ServicePort{Name: "x", Protocol: "ICMP", Port: 1})),
			reason: ReasonInvalidPort},
		{name: "headless ignored", svc: svcFixture("a", func(s *corev1.Service) { s.Spec.ClusterIP = "None" }), ignored: IgnoredHeadless},
		{name: "external name ignored", svc: svcFixture("a", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }),
			ignored: IgnoredExternalName},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conv := FromService(tc.svc, nil)
			if tc.ignored != "" {
				if conv.Ignored != tc.ignored || conv.Service != nil {
					t.Fatalf("FromService ignored = %q, service = %+v; want ignored %q", conv.Ignored, conv.Service, tc.ignored)
				}
				return
			}
			if conv.Service == nil || conv.Service.Rejected == nil {
				t.Fatalf("FromService = %+v; want rejection %s", conv, tc.reason)
			}
			if got := conv.Service.Rejected.Reason; got != tc.reason {
				t.Fatalf("reason = %s (%s); want %s", got, conv.Service.Rejected.Message, tc.reason)
			}
			if !strings.Contains(conv.Service.Rejected.Message, tc.inMsg) {
				t.Fatalf("message = %q; want it to contain %q", conv.Service.Rejected.Message, tc.inMsg)
			}
			if len(conv.Service.Ports) != 0 {
				t.Fatalf("rejected service has %d ports; want 0", len(conv.Service.Ports))
			}
		})
	}
}

func TestFromServicePorts(t *testing.T) {
	type portWant struct {
		name                          string
		proto                         Protocol
		port, end, target, node, nend uint16
		targetName                    string
		all                           bool
	}
	tests := []struct {
		name string
		svc  *corev1.Service
		want []portWant
	}{
		{name: "single", svc: svcFixture("a"), want: []portWant{{name: "http", proto: TCP, port: 80, end: 80, target: 8080}}},
		{name: "named target", svc: svcFixture("a", withPorts(tcpPort("http", 80, intstr.FromString("web")))),
			want: []portWant{{name: "http", proto: TCP, port: 80, end: 80, targetName: "web"}}},
		{name: "range with node block", svc: svcFixture("a",
			withPorts(tcpPort("rtp", 16384, intstr.FromInt32(16384)), tcpPort("sip", 5060, intstr.IntOrString{})),
			func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeNodePort; s.Spec.Ports[1].NodePort = 30060 },
			annotate(annotation.PortRangesKey, "rtp=16384-16483", annotation.NodePortRangesKey, "rtp=40100-40199")),
			want: []portWant{{name: "rtp", proto: TCP, port: 16384, end: 16483, node: 40100, nend: 40199},
				{name: "sip", proto: TCP, port: 5060, end: 5060, target: 5060, node: 30060, nend: 30060}}},
		{name: "node block ignored on ClusterIP", svc: svcFixture("a", withPorts(tcpPort("rtp", 16384, intstr.IntOrString{})),
			annotate(annotation.PortRangesKey, "rtp=16384-16483", annotation.NodePortRangesKey, "rtp=40100-40199")),
			want: []portWant{{name: "rtp", proto: TCP, port: 16384, end: 16483}}},
		{name: "all-ports per protocol", svc: svcFixture("a",
			withPorts(tcpPort("a", 1, intstr.IntOrString{}), tcpPort("b", 2, intstr.FromInt32(2)),
				corev1.ServicePort{Name: "c", Protocol: corev1.ProtocolUDP, Port: 3}),
			func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.Ports[0].NodePort = 30001
			},
			annotate(annotation.AllPortsKey, "true")),
			want: []portWant{{name: AllPortsName, proto: TCP, all: true}, {name: AllPortsName, proto: UDP, all: true}}},
		// KEP-2610: an all-ports Service with no ports forwards every port of every protocol.
		{name: "all-ports without ports", svc: svcFixture("a", withPorts(), annotate(annotation.AllPortsKey, "true")),
			want: []portWant{{name: AllPortsName, proto: TCP, all: true}, {name: AllPortsName, proto: UDP, all: true},
				{name: AllPortsName, proto: SCTP, all: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conv := FromService(tc.svc, nil)
			if conv.Service == nil || conv.Service.Rejected != nil {
				t.Fatalf("FromService = %+v; want accepted", conv)
			}
			var got []portWant
			for _, p := range conv.Service.Ports {
				got = append(got, portWant{p.Name.Port, p.Name.Protocol, p.Port, p.PortEnd, p.TargetPort,
					p.NodePort, p.NodePortEnd, p.TargetPortName, p.AllPorts})
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ports = %+v; want %+v", got, tc.want)
			}
		})
	}
}

func TestFromServiceCommonFields(t *testing.T) {
	svc := svcFixture("a", func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"}
		s.Spec.ExternalIPs = []string{"192.0.2.1"}
		s.Spec.LoadBalancerSourceRanges = []string{"203.0.113.7/24"}
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = ptr(corev1.ServiceInternalTrafficPolicyLocal)
		s.Spec.HealthCheckNodePort = 32000
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
		s.Spec.TrafficDistribution = ptr(corev1.ServiceTrafficDistributionPreferClose)
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}, {Hostname: "lb.example"},
			{IP: "198.51.100.2", IPMode: ptr(corev1.LoadBalancerIPModeProxy)}}
	})
	conv := FromService(svc, nil)
	if conv.Service == nil || len(conv.Service.Ports) != 1 {
		t.Fatalf("FromService = %+v; want one port", conv)
	}
	p := conv.Service.Ports[0]
	checks := []struct {
		name      string
		got, want any
	}{
		{"clusterIPs", p.ClusterIPs, []netip.Addr{addr("10.96.0.10"), addr("fd00:96::10")}},
		{"externalIPs", p.ExternalIPs, []netip.Addr{addr("192.0.2.1")}},
		{"lbIPs", p.LoadBalancerIPs, []netip.Addr{addr("198.51.100.1")}},
		{"sourceRanges", p.LoadBalancerSourceRanges, []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}},
		{"externalLocal", p.ExternalTrafficLocal, true},
		{"internalLocal", p.InternalTrafficLocal, true},
		{"healthCheck", p.HealthCheckNodePort, uint16(32000)},
		{"affinity", p.AffinityTimeout, DefaultAffinityTimeout},
		{"preferClose", p.PreferClose, true},
		{"preferSameNode", p.PreferSameNode, false},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Fatalf("%s = %v; want %v", c.name, c.got, c.want)
			}
		})
	}
	for _, c := range []struct {
		td                          string
		preferClose, preferSameNode bool
	}{
		{corev1.ServiceTrafficDistributionPreferSameZone, true, false},
		{corev1.ServiceTrafficDistributionPreferSameNode, true, true},
		{"SomethingNew", false, false},
	} {
		t.Run("trafficDistribution "+c.td, func(t *testing.T) {
			s := svc.DeepCopy()
			s.Spec.TrafficDistribution = ptr(c.td)
			p := FromService(s, nil).Service.Ports[0]
			if p.PreferClose != c.preferClose || p.PreferSameNode != c.preferSameNode {
				t.Fatalf("PreferClose %v PreferSameNode %v; want %v %v", p.PreferClose, p.PreferSameNode, c.preferClose, c.preferSameNode)
			}
		})
	}
	// A Service written before dual-stack (or by hand) has spec.clusterIP only.
	t.Run("clusterIP without clusterIPs", func(t *testing.T) {
		s := svcFixture("b", func(s *corev1.Service) { s.Spec.ClusterIPs = nil })
		if got, want := FromService(s, nil).Service.Ports[0].ClusterIPs, []netip.Addr{addr("10.96.0.10")}; !reflect.DeepEqual(got, want) {
			t.Fatalf("ClusterIPs = %v; want %v", got, want)
		}
	})
	t.Run("explicit affinity timeout", func(t *testing.T) {
		svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
		if got := FromService(svc, nil).Service.Ports[0].AffinityTimeout; got != time.Minute {
			t.Fatalf("AffinityTimeout = %v; want %v", got, time.Minute)
		}
	})
}

func TestFromServiceEndpoints(t *testing.T) {
	v4, v6 := discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6
	httpPort := []discoveryv1.EndpointPort{slicePortFixture("http", 8080)}
	tests := []struct {
		name     string
		svc      *corev1.Service
		slices   []*discoveryv1.EndpointSlice
		want     []Endpoint
		warnings int
	}{
		{name: "conditions and topology", svc: svcFixture("a"), slices: []*discoveryv1.EndpointSlice{
			sliceFixture("a-1", "a", v4, httpPort,
				epFixture{addr: "10.244.0.2", node: "n1", zone: "z1"},
				epFixture{addr: "10.244.0.1", ready: ptr(false), serving: ptr(true), terminate: ptr(true)},
				epFixture{addr: "10.244.0.3", ready: ptr(false)})},
			want: []Endpoint{
				{Addr: addr("10.244.0.1"), Port: 8080, Serving: true, Terminating: true},
				Endpoint{Addr: addr("10.244.0.2"), Port: 8080, Ready: true, Serving: true}.At("n1", "z1", "z1"),
				{Addr: addr("10.244.0.3"), Port: 8080},
			}},
		{name: "dedup prefers ready", svc: svcFixture("a"), slices: []*discoveryv1.EndpointSlice{
			sliceFixture("a-1", "a", v4, httpPort, epFixture{addr: "10.244.0.1", ready: ptr(false)}),
			sliceFixture("a-2", "a", v4, httpPort, epFixture{addr: "10.244.0.1"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true}}},
		{name: "bad addresses skipped with warning", svc: svcFixture("a"), slices: []*discoveryv1.EndpointSlice{
			sliceFixture("a-1", "a", v4, httpPort, epFixture{addr: "nope"}, epFixture{addr: "fd00:244::1"}, epFixture{addr: "10.244.0.1"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true}}, warnings: 1},
		{name: "other family and other service ignored", svc: svcFixture("a"), slices: []*discoveryv1.EndpointSlice{
			sliceFixture("a-6", "a", v6, httpPort, epFixture{addr: "fd00:244::1"}),
			sliceFixture("b-1", "b", v4, httpPort, epFixture{addr: "10.244.0.9"})},
			want: nil},
		{name: "dual stack keeps both", svc: svcFixture("a", func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::10"} }),
			slices: []*discoveryv1.EndpointSlice{
				sliceFixture("a-4", "a", v4, httpPort, epFixture{addr: "10.244.0.1"}),
				sliceFixture("a-6", "a", v6, httpPort, epFixture{addr: "fd00:244::1"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true},
				{Addr: addr("fd00:244::1"), Port: 8080, Ready: true, Serving: true}}},
		{name: "named target resolved per slice", svc: svcFixture("a", withPorts(tcpPort("http", 80, intstr.FromString("web")))),
			slices: []*discoveryv1.EndpointSlice{
				sliceFixture("a-1", "a", v4, []discoveryv1.EndpointPort{slicePortFixture("http", 8080)}, epFixture{addr: "10.244.0.1"}),
				sliceFixture("a-2", "a", v4, []discoveryv1.EndpointPort{slicePortFixture("http", 9090)}, epFixture{addr: "10.244.0.2"}),
				sliceFixture("a-3", "a", v4, []discoveryv1.EndpointPort{slicePortFixture("metrics", 9100)}, epFixture{addr: "10.244.0.3"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true},
				{Addr: addr("10.244.0.2"), Port: 9090, Ready: true, Serving: true}}},
		{name: "range keeps port", svc: svcFixture("a", withPorts(tcpPort("http", 80, intstr.IntOrString{})),
			annotate(annotation.PortRangesKey, "http=80-90")),
			slices: []*discoveryv1.EndpointSlice{sliceFixture("a-1", "a", v4, []discoveryv1.EndpointPort{slicePortFixture("http", 80)},
				epFixture{addr: "10.244.0.1"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 0, Ready: true, Serving: true}}},
		{name: "all-ports keeps port", svc: svcFixture("a", withPorts(tcpPort("http", 80, intstr.IntOrString{})),
			annotate(annotation.AllPortsKey, "true")),
			slices: []*discoveryv1.EndpointSlice{sliceFixture("a-1", "a", v4,
				[]discoveryv1.EndpointPort{{Protocol: ptr(corev1.ProtocolTCP)}}, epFixture{addr: "10.244.0.1"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 0, Ready: true, Serving: true}}},
		// KEP-2610: the EndpointSlice of an all-ports Service has no ports; it means every port.
		{name: "all-ports slice without ports", svc: svcFixture("a", withPorts(tcpPort("http", 80, intstr.IntOrString{})),
			annotate(annotation.AllPortsKey, "true")),
			slices: []*discoveryv1.EndpointSlice{sliceFixture("a-1", "a", v4, nil, epFixture{addr: "10.244.0.1"})},
			want:   []Endpoint{{Addr: addr("10.244.0.1"), Port: 0, Ready: true, Serving: true}}},
		{name: "all-ports slice port without number or protocol", svc: svcFixture("a", withPorts(tcpPort("http", 80, intstr.IntOrString{})),
			annotate(annotation.AllPortsKey, "true")),
			slices: []*discoveryv1.EndpointSlice{sliceFixture("a-1", "a", v4, []discoveryv1.EndpointPort{{}}, epFixture{addr: "10.244.0.1"})},
			want:   []Endpoint{{Addr: addr("10.244.0.1"), Port: 0, Ready: true, Serving: true}}},
		// Without cluster IPs (a file-mode Service), spec.ipFamilies picks the endpoints.
		{name: "no cluster IP, ipFamilies IPv4", svc: svcFixture("a", func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = "", nil, []corev1.IPFamily{corev1.IPv4Protocol}
		}), slices: []*discoveryv1.EndpointSlice{
			sliceFixture("a-4", "a", v4, httpPort, epFixture{addr: "10.244.0.1"}),
			sliceFixture("a-6", "a", v6, httpPort, epFixture{addr: "fd00:244::1"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true}}},
		{name: "no cluster IP, ipFamilies IPv6", svc: svcFixture("a", func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs, s.Spec.IPFamilies = "", nil, []corev1.IPFamily{corev1.IPv6Protocol}
		}), slices: []*discoveryv1.EndpointSlice{
			sliceFixture("a-4", "a", v4, httpPort, epFixture{addr: "10.244.0.1"}),
			sliceFixture("a-6", "a", v6, httpPort, epFixture{addr: "fd00:244::1"})},
			want: []Endpoint{{Addr: addr("fd00:244::1"), Port: 8080, Ready: true, Serving: true}}},
		{name: "no cluster IP, no ipFamilies: both", svc: svcFixture("a", func(s *corev1.Service) {
			s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
		}), slices: []*discoveryv1.EndpointSlice{
			sliceFixture("a-4", "a", v4, httpPort, epFixture{addr: "10.244.0.1"}),
			sliceFixture("a-6", "a", v6, httpPort, epFixture{addr: "fd00:244::1"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true},
				{Addr: addr("fd00:244::1"), Port: 8080, Ready: true, Serving: true}}},
		// The API server accepts an IPv4-mapped IPv6 address in an IPv4 slice: it is that IPv4
		// address.
		{name: "IPv4-mapped address in an IPv4 slice", svc: svcFixture("a"), slices: []*discoveryv1.EndpointSlice{
			sliceFixture("a-1", "a", v4, httpPort, epFixture{addr: "::ffff:10.244.0.1"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true}}},
		// Two slices serve the port, one listing it second: each endpoint gets its own slice's
		// number for the port, not its slice's first port.
		{name: "two slices, port listed second", svc: svcFixture("a"), slices: []*discoveryv1.EndpointSlice{
			sliceFixture("a-1", "a", v4, []discoveryv1.EndpointPort{slicePortFixture("metrics", 9100), slicePortFixture("http", 8080)},
				epFixture{addr: "10.244.0.1"}),
			sliceFixture("a-2", "a", v4, []discoveryv1.EndpointPort{slicePortFixture("http", 8081)}, epFixture{addr: "10.244.0.2"})},
			want: []Endpoint{{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true},
				{Addr: addr("10.244.0.2"), Port: 8081, Ready: true, Serving: true}}},
		// A slice without ports means nothing for a Service with ports of its own.
		{name: "single port, slice without ports", svc: svcFixture("a"),
			slices: []*discoveryv1.EndpointSlice{sliceFixture("a-1", "a", v4, nil, epFixture{addr: "10.244.0.1"})},
			want:   nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conv := FromService(tc.svc, tc.slices)
			if conv.Service == nil || conv.Service.Rejected != nil || len(conv.Service.Ports) != 1 {
				t.Fatalf("FromService = %+v; want one accepted port", conv)
			}
			if got := conv.Service.Ports[0].Endpoints; !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("endpoints = %+v; want %+v", got, tc.want)
			}
			if len(conv.Warnings) != tc.warnings {
				t.Fatalf("warnings = %q; want %d", conv.Warnings, tc.warnings)
			}
		})
	}
}

func TestHandlesService(t *testing.T) {
	labelled := map[string]string{annotation.ServiceProxyNameLabel: "nftproxy"}
	tests := []struct {
		name      string
		labels    map[string]string
		proxyName string
		want      bool
	}{
		{"unlabelled, no name", nil, "", true},
		{"labelled, no name", labelled, "", false},
		{"labelled, same name", labelled, "nftproxy", true},
		{"labelled, other name", labelled, "other", false},
		{"unlabelled, name", nil, "nftproxy", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := HandlesService(tc.labels, tc.proxyName); got != tc.want {
				t.Fatalf("HandlesService(%v, %q) = %v; want %v", tc.labels, tc.proxyName, got, tc.want)
			}
		})
	}
}
