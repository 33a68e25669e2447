package model

import (
	"fmt"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
)

// BenchmarkTrackerLoad measures a Tracker taking in a whole cluster's Services, as at start-up:
// n Services, 3 in 10 of them NodePort (each with its own node port), every one on its own
// cluster IP. The node ports of a protocol share one claim key, so this is where the claim
// index's cost per Service shows.
func BenchmarkTrackerLoad(b *testing.B) {
	for _, n := range []int{10000, 50000} {
		b.Run(fmt.Sprintf("%dk Services", n/1000), func(b *testing.B) {
			svcs := make([]*corev1.Service, n)
			nodePorts := 0
			for i := range svcs {
				ip := fmt.Sprintf("10.96.%d.%d", i/250, i%250+1)
				svcs[i] = svcFixture(fmt.Sprintf("s%d", i), func(s *corev1.Service) {
					s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip}
					if i%10 < 3 {
						s.Spec.Type = corev1.ServiceTypeNodePort
						s.Spec.Ports[0].NodePort = int32(20000 + nodePorts)
						nodePorts++
					}
				})
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				tr := NewTracker(TrackerConfig{Logger: logr.Discard()})
				for _, s := range svcs {
					tr.UpsertService(s)
				}
				if ch := tr.TakeChanges(); len(ch.Services) != n {
					b.Fatalf("%d Services changed, want %d", len(ch.Services), n)
				}
			}
		})
	}
}
