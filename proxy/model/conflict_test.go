package model

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// TestConflictWithholdsOnlyTheClash: two LoadBalancer Services share an
// ingress IP. The younger one's port 443 clashes with the older one's there: only that port on
// that address is withheld; its ClusterIP keeps 443, and its port 80 stays on the shared IP.
func TestConflictWithholdsOnlyTheClash(t *testing.T) {
	const shared = "198.51.100.40"
	rec := &recorder{}
	tr := newTestTracker(rec)
	tr.UpsertService(svcFixture("old", created(1), lbIngress(shared), withPorts(tcpPort("https", 443, intstr.IntOrString{})),
		func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.41", []string{"10.96.0.41"} }))
	tr.UpsertService(svcFixture("young", created(2), lbIngress(shared),
		withPorts(tcpPort("http", 80, intstr.IntOrString{}), tcpPort("https", 443, intstr.IntOrString{})),
		func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.42", []string{"10.96.0.42"} }))
	if ev, want := rec.take(), []string{"ns/young ServiceConflict (partial)"}; !reflect.DeepEqual(ev, want) {
		t.Fatalf("events = %v; want %v", ev, want)
	}
	y := tr.Service(keyOf("young"))
	if y.Rejected != nil || y.Withheld == nil || !y.Withheld.Partial {
		t.Fatalf("young = %+v; want served, withholding part of it", y)
	}
	for _, want := range []string{`port "https" (TCP on ` + shared + `, port 443)`, "service ns/old", "the rest of the Service is served"} {
		if !strings.Contains(y.Withheld.Message, want) {
			t.Errorf("message %q; want it to contain %q", y.Withheld.Message, want)
		}
	}
	lbIPs := map[string][]netip.Addr{}
	for _, p := range y.Ports {
		if !reflect.DeepEqual(p.ClusterIPs, []netip.Addr{addr("10.96.0.42")}) {
			t.Errorf("port %s: ClusterIPs %v; want the Service's own ClusterIP kept", p.Name, p.ClusterIPs)
		}
		lbIPs[p.Name.Port] = p.LoadBalancerIPs
	}
	if want := map[string][]netip.Addr{"http": {addr(shared)}, "https": nil}; !reflect.DeepEqual(lbIPs, want) {
		t.Errorf("LoadBalancer IPs by port = %v; want %v (only https withheld on the shared IP)", lbIPs, want)
	}
	if o := tr.Service(keyOf("old")); o.Rejected != nil || o.Withheld != nil || len(o.Ports[0].LoadBalancerIPs) != 1 {
		t.Errorf("old = %+v; want it untouched, keeping 443 on the shared IP", o)
	}
}

// TestConflictAllPortsOnSharedIP: an all-ports Service sharing an ingress IP with an older
// single-port Service loses that protocol on the shared IP only; its ClusterIP and its other
// protocol there are served.
func TestConflictAllPortsOnSharedIP(t *testing.T) {
	const shared = "198.51.100.43"
	tr := newTestTracker(&recorder{})
	tr.UpsertService(svcFixture("old", created(1), lbIngress(shared), withPorts(tcpPort("https", 443, intstr.IntOrString{})),
		func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "10.96.0.44", []string{"10.96.0.44"} }))
	tr.UpsertService(svcFixture("any", created(2), lbIngress(shared), annotate(annotation.AllPortsKey, "true"),
		withPorts(tcpPort("tcp", 1, intstr.IntOrString{}), corev1.ServicePort{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 1})))
	a := tr.Service(keyOf("any"))
	if a.Rejected != nil || a.Withheld == nil || len(a.Ports) != 2 {
		t.Fatalf("any = %+v; want both protocols served, part withheld", a)
	}
	for _, p := range a.Ports {
		wantLB := p.Name.Protocol == UDP
		if len(p.ClusterIPs) != 1 || (len(p.LoadBalancerIPs) == 1) != wantLB {
			t.Errorf("%s: ClusterIPs %v, LoadBalancerIPs %v; want the ClusterIP, and the shared IP only for UDP", p.Name, p.ClusterIPs, p.LoadBalancerIPs)
		}
	}
}

// TestConflictNothingLeft: a Service whose every address clashes (a hand-written manifest with
// another Service's ClusterIP and ingress IP) has nothing left to serve and is rejected whole.
func TestConflictNothingLeft(t *testing.T) {
	tr := newTestTracker(&recorder{})
	tr.UpsertService(svcFixture("old", created(1), onIP("10.96.0.45", "192.0.2.45")))
	tr.UpsertService(svcFixture("copy", created(2), onIP("10.96.0.45", "192.0.2.45")))
	c := tr.Service(keyOf("copy"))
	if c.Rejected == nil || c.Rejected.Reason != ReasonServiceConflict || c.Rejected.Partial || len(c.Ports) != 0 {
		t.Fatalf("copy = %+v; want rejected as a whole, %s", c, ReasonServiceConflict)
	}
	if !strings.Contains(c.Rejected.Message, "nothing of the Service is left") {
		t.Errorf("message %q; want it to say nothing is left", c.Rejected.Message)
	}
}

// TestConflictPartialLoserStillHolds: a Service that lost one address to an older Service keeps
// its other addresses, and a younger Service clashing there loses to it: what a partial loser
// still serves is as much its own as a winner's.
func TestConflictPartialLoserStillHolds(t *testing.T) {
	tr := newTestTracker(&recorder{})
	tr.UpsertService(svcFixture("a", created(1), onIP("10.96.0.51", "192.0.2.51")))
	tr.UpsertService(svcFixture("b", created(2), onIP("10.96.0.52", "192.0.2.51"),
		func(s *corev1.Service) { s.Spec.ExternalIPs = append(s.Spec.ExternalIPs, "192.0.2.52") }))
	tr.UpsertService(svcFixture("c", created(3), onIP("10.96.0.53", "192.0.2.52")))
	b, c := tr.Service(keyOf("b")), tr.Service(keyOf("c"))
	if b.Rejected != nil || !reflect.DeepEqual(b.Ports[0].ExternalIPs, []netip.Addr{addr("192.0.2.52")}) {
		t.Fatalf("b = %+v; want it served on 192.0.2.52 only (192.0.2.51 is a's)", b)
	}
	if c.Rejected != nil || c.Withheld == nil || len(c.Ports[0].ExternalIPs) != 0 {
		t.Fatalf("c = %+v; want its external IP withheld (b holds it), its cluster IP served", c)
	}
	if !strings.Contains(c.Withheld.Message, "service ns/b") {
		t.Errorf("c's message %q; want it to name service ns/b", c.Withheld.Message)
	}
}
