package model

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestChangesStartedAtTriggerTime: Changes.Started follows upstream kube-proxy's trigger times:
// one per EndpointSlice update that changed the Service, newer than the Tracker; a Service with
// none (no or a malformed annotation, a deleted slice, an older trigger time) starts when the
// Tracker recorded its change; an update that changes no model adds nothing.
func TestChangesStartedAtTriggerTime(t *testing.T) {
	now := t0
	tr := NewTracker(TrackerConfig{NodeName: "n1", Logger: logr.Discard(), Now: func() time.Time { return now }})
	ports := []discoveryv1.EndpointPort{slicePortFixture("http", 8080)}
	sl := func(svc, trigger, addr string) *discoveryv1.EndpointSlice {
		s := sliceFixture(svc+"-1", svc, discoveryv1.AddressTypeIPv4, ports, epFixture{addr: addr})
		if trigger != "" {
			s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger}
		}
		return s
	}
	at := func(d time.Duration) string { return t0.Add(d).Format(time.RFC3339Nano) }
	for i, name := range []string{"a", "b", "c", "d"} {
		ip := fmt.Sprintf("10.96.0.%d", 10+i)
		tr.UpsertService(svcFixture(name, func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip} }))
		tr.UpsertEndpointSlice(sl(name, at(-time.Hour), "10.244.0.1")) // before the Tracker: not measured
	}
	now = t0.Add(time.Second)
	if got, want := tr.TakeChanges().Started[keyOf("a")], []time.Time{t0}; !reflect.DeepEqual(got, want) {
		t.Errorf("first changes of a: started %v, want the receipt %v", got, want)
	}

	now = t0.Add(10 * time.Second)
	tr.UpsertEndpointSlice(sl("a", at(2*time.Second), "10.244.0.2"))
	tr.UpsertEndpointSlice(sl("a", at(3*time.Second), "10.244.0.3"))
	tr.UpsertEndpointSlice(sl("a", at(4*time.Second), "10.244.0.3")) // same endpoints: no change
	tr.UpsertEndpointSlice(sl("b", "not a time", "10.244.0.2"))
	tr.UpsertEndpointSlice(sl("c", at(5*time.Second), "10.244.0.2"))
	tr.DeleteEndpointSlice("ns", "c-1")
	tr.UpsertEndpointSlice(sl("d", at(6*time.Second), "10.244.0.1")) // same endpoints: no change
	got := tr.TakeChanges().Started
	want := map[ServiceKey][]time.Time{
		keyOf("a"): {t0.Add(2 * time.Second), t0.Add(3 * time.Second)},
		keyOf("b"): {now},
		keyOf("c"): {now},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("started:\n got %v\nwant %v", got, want)
	}
	if got := tr.TakeChanges().Started; len(got) != 0 {
		t.Errorf("started after a second take: %v, want none", got)
	}
}
