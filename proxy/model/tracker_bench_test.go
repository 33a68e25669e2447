package model

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// BenchmarkTrackerEndpointChange measures one EndpointSlice update with 10k NodePort Services
// tracked: the cost a sync loop pays per endpoint change before the ruleset builder runs.
func BenchmarkTrackerEndpointChange(b *testing.B) {
	tr := NewTracker(TrackerConfig{Logger: logr.Discard()})
	const n = 10000
	port := []discoveryv1.EndpointPort{slicePortFixture("http", 8080)}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("s%d", i)
		tr.UpsertService(svcFixture(name, onIP(fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), fmt.Sprintf("192.0.%d.%d", i/250, i%250+1)),
			func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Spec.Ports[0].NodePort = int32(20000 + i)
			}))
		tr.UpsertEndpointSlice(sliceFixture(name+"-1", name, discoveryv1.AddressTypeIPv4, port, epFixture{addr: "10.244.0.1"}))
	}
	tr.TakeChanges()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tr.UpsertEndpointSlice(sliceFixture("s42-1", "s42", discoveryv1.AddressTypeIPv4, port,
			epFixture{addr: fmt.Sprintf("10.244.1.%d", i%250+1)}))
	}
	b.StopTimer()
	if ch := tr.TakeChanges(); len(ch.Services) != 1 {
		b.Fatalf("changed = %v; want only ns/s42", ch.Services)
	}
}

// BenchmarkTrackerNodeAddressChange measures a change of the node's kernel addresses with 10k
// LoadBalancer Services tracked: an address no Service names (the common case: an interface
// coming up), and the LoadBalancer IP of one Service (a VIP moving to this node).
func BenchmarkTrackerNodeAddressChange(b *testing.B) {
	for _, c := range []struct {
		name  string
		extra netip.Addr
	}{{"unused address", netip.MustParseAddr("203.0.113.1")}, {"one Service's LB IP", netip.MustParseAddr("198.51.0.43")}} {
		b.Run(c.name, func(b *testing.B) {
			tr := NewTracker(TrackerConfig{Logger: logr.Discard()})
			for i := 0; i < 10000; i++ {
				name := fmt.Sprintf("s%d", i)
				tr.UpsertService(svcFixture(name, onIP(fmt.Sprintf("10.96.%d.%d", i/250, i%250+1), fmt.Sprintf("192.0.%d.%d", i/250, i%250+1)),
					lbIngress(fmt.Sprintf("198.51.%d.%d", i/250, i%250+1))))
			}
			base := []netip.Addr{netip.MustParseAddr("192.0.2.250")}
			tr.SetLocalAddresses(base)
			tr.TakeChanges()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					tr.SetLocalAddresses(append(base, c.extra))
				} else {
					tr.SetLocalAddresses(base)
				}
			}
		})
	}
}
