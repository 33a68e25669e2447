package model

import (
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestChangeCounts follows kube-proxy's change trackers: every Service and EndpointSlice event
// counts towards the totals, only real changes are pending, and taking the changes clears them.
func TestChangeCounts(t *testing.T) {
	tr := newTestTracker(&recorder{})
	ports := []discoveryv1.EndpointPort{slicePortFixture("http", 8080)}
	v4 := sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4, ports, epFixture{addr: "10.244.0.1"})
	v4moved := sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4, ports, epFixture{addr: "10.244.0.2"})
	fqdn := sliceFixture("a-f", "a", discoveryv1.AddressTypeFQDN, ports, epFixture{addr: "db.example"})
	orphan := sliceFixture("x-1", "x", discoveryv1.AddressTypeIPv4, ports, epFixture{addr: "10.244.0.3"})
	delete(orphan.Labels, discoveryv1.LabelServiceName)

	steps := []struct {
		name string
		do   func()
		want ChangeCounts
	}{
		{"two Services added", func() { tr.UpsertService(svcFixture("a")); tr.UpsertService(svcFixture("b")) },
			ChangeCounts{ServiceEvents: 2, PendingServices: 2}},
		{"one updated unchanged", func() { tr.UpsertService(svcFixture("a")) },
			ChangeCounts{ServiceEvents: 3, PendingServices: 2}},
		{"a slice added, then changed", func() { tr.UpsertEndpointSlice(v4); tr.UpsertEndpointSlice(v4moved) },
			ChangeCounts{ServiceEvents: 3, EndpointSliceEvents: 2, PendingServices: 2, PendingEndpointSliceChanges: 2}},
		{"FQDN and unowned slices are not counted", func() { tr.UpsertEndpointSlice(fqdn); tr.UpsertEndpointSlice(orphan) },
			ChangeCounts{ServiceEvents: 3, EndpointSliceEvents: 2, PendingServices: 2, PendingEndpointSliceChanges: 2}},
		{"taken by a sync", func() { tr.TakeChanges() },
			ChangeCounts{ServiceEvents: 3, EndpointSliceEvents: 2}},
		{"slice resent unchanged", func() { tr.UpsertEndpointSlice(v4moved) },
			ChangeCounts{ServiceEvents: 3, EndpointSliceEvents: 3}},
		{"slice and Service deleted", func() { tr.DeleteEndpointSlice("ns", "a-1"); tr.DeleteService(keyOf("b")) },
			ChangeCounts{ServiceEvents: 4, EndpointSliceEvents: 4, PendingServices: 1, PendingEndpointSliceChanges: 1}},
		{"FQDN slice deleted, not counted", func() { tr.DeleteEndpointSlice("ns", "a-f") },
			ChangeCounts{ServiceEvents: 4, EndpointSliceEvents: 4, PendingServices: 1, PendingEndpointSliceChanges: 1}},
	}
	for _, s := range steps {
		s.do()
		if got := tr.ChangeCounts(); got != s.want {
			t.Fatalf("after %s: counts %+v, want %+v", s.name, got, s.want)
		}
	}
}
