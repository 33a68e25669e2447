package model

import (
	"reflect"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

func mustPack(t *testing.T, name string) *PackedService {
	t.Helper()
	p, err := PackService(svcFixture(name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTrackerPackedService: a Service given packed (as the Kubernetes source keeps it) is
// modelled exactly as the same Service given decoded, through an endpoint change (converted
// again from the packing), an unchanged upsert (no change recorded), a change, and its delete.
func TestTrackerPackedService(t *testing.T) {
	slice := sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{slicePortFixture("http", 8080)}, epFixture{addr: "10.244.0.1"})
	moreEndpoints := sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{slicePortFixture("http", 8080)}, epFixture{addr: "10.244.0.1"}, epFixture{addr: "10.244.0.2"})
	plain, packed := newTestTracker(&recorder{}), newTestTracker(&recorder{})
	plain.UpsertService(svcFixture("a"))
	packed.UpsertPackedService(mustPack(t, "a"))
	for _, tr := range []*Tracker{plain, packed} {
		tr.UpsertEndpointSlice(slice)
		tr.UpsertEndpointSlice(moreEndpoints)
	}
	if got, want := packed.Service(keyOf("a")), plain.Service(keyOf("a")); got == nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("model of the packed Service:\n got %+v\nwant %+v", got, want)
	}
	if n := len(packed.Service(keyOf("a")).Ports[0].Endpoints); n != 2 {
		t.Fatalf("packed Service has %d endpoints after the endpoint change, want 2", n)
	}
	packed.TakeChanges()
	packed.UpsertPackedService(mustPack(t, "a"))
	if ch := packed.TakeChanges(); !ch.Empty() {
		t.Errorf("an equal packed Service recorded changes %+v, want none", ch)
	}
	changed := svcFixture("a")
	changed.Spec.Ports[0].Port = 81
	p, err := PackService(changed)
	if err != nil {
		t.Fatal(err)
	}
	packed.UpsertPackedService(p)
	if got := packed.Service(keyOf("a")); got == nil || got.Ports[0].Port != 81 {
		t.Errorf("after a changed packed Service the model is %+v, want port 81", got)
	}
	packed.DeleteService(keyOf("a"))
	if s := packed.Service(keyOf("a")); s != nil {
		t.Errorf("deleted packed Service still has model %+v", s)
	}
}

// TestPackServiceRoundTrip: a packing decodes to the Service packed, each time a new object.
func TestPackServiceRoundTrip(t *testing.T) {
	svc := svcFixture("a")
	p, err := PackService(svc)
	if err != nil {
		t.Fatal(err)
	}
	a, b := p.Service(), p.Service()
	if !reflect.DeepEqual(a, svc) || a == b {
		t.Errorf("decoded %+v (same object twice: %v), want %+v, a new object each time", a, a == b, svc)
	}
	if p.Key() != keyOf("a") || !p.Equal(mustPack(t, "a")) {
		t.Errorf("key %v, equal to a packing of the same Service: %v", p.Key(), p.Equal(mustPack(t, "a")))
	}
}

// TestPackedServiceChangeCounts: a packed Service's events count as a decoded one's do (the
// kubeproxy_sync_proxy_rules_service_changes_* metrics): an unchanged upsert counts as an event
// but is not pending, a changed one is both.
func TestPackedServiceChangeCounts(t *testing.T) {
	tr := newTestTracker(&recorder{})
	changed := svcFixture("a")
	changed.Spec.Ports[0].Port = 81
	p, err := PackService(changed)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		do   func()
		want ChangeCounts
	}{
		{"added", func() { tr.UpsertPackedService(mustPack(t, "a")) }, ChangeCounts{ServiceEvents: 1, PendingServices: 1}},
		{"taken by a sync", func() { tr.TakeChanges() }, ChangeCounts{ServiceEvents: 1}},
		{"updated unchanged", func() { tr.UpsertPackedService(mustPack(t, "a")) }, ChangeCounts{ServiceEvents: 2}},
		{"changed", func() { tr.UpsertPackedService(p) }, ChangeCounts{ServiceEvents: 3, PendingServices: 1}},
	}
	for _, s := range steps {
		s.do()
		if got := tr.ChangeCounts(); got != s.want {
			t.Fatalf("after %s: counts %+v, want %+v", s.name, got, s.want)
		}
	}
}
