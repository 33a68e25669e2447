package model

import (
	"reflect"
	"testing"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// TestTrackerRefusedService: a Service the kernel refused is published as rejected (reported
// once, not a pending change), comes back when it changes or on RetryRefused, and a refusal of
// a model that is no longer current is ignored.
func TestTrackerRefusedService(t *testing.T) {
	rec := &recorder{}
	tr := newTestTracker(rec)
	tr.UpsertService(svcFixture("a"))
	tr.TakeChanges()
	tried := tr.Service(keyOf("a"))
	refusal := &Rejection{Reason: ReasonKernelRefused, Message: "service ns/a: the kernel refused it"}

	tr.RecordKernelRefusal(keyOf("a"), tried, refusal)
	if s := tr.Snapshot().Services[keyOf("a")]; s == nil || s.Rejected != refusal || len(s.Ports) != 0 {
		t.Fatalf("snapshot after the refusal = %+v; want rejected with %s and no ports", s, ReasonKernelRefused)
	}
	if got := rec.take(); !reflect.DeepEqual(got, []string{"ns/a KernelRefused"}) {
		t.Fatalf("rejection events = %v; want the refusal once", got)
	}
	if n := tr.Pending(); n != 0 {
		t.Fatalf("%d pending changes after the refusal; want 0 (the sync loop already took it out)", n)
	}
	tr.RecordKernelRefusal(keyOf("a"), tried, refusal)
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("a repeated refusal was reported again: %v", got)
	}

	tr.RetryRefused()
	// Pending from the retry on (/healthz reads it), and measured from it.
	if tr.PendingSince().IsZero() {
		t.Fatalf("PendingSince after RetryRefused is zero; want the time of the retry")
	}
	if ch := tr.TakeChanges(); !reflect.DeepEqual(ch.Services, []ServiceKey{keyOf("a")}) || ch.Since.IsZero() ||
		len(ch.Started[keyOf("a")]) != 1 {
		t.Fatalf("changes after RetryRefused = %+v; want a, since the retry, its start measured", ch)
	}
	if s := tr.Service(keyOf("a")); s != tried {
		t.Fatalf("RetryRefused published %+v; want the accepted model again", s)
	}
	if got := rec.take(); !reflect.DeepEqual(got, []string{"ns/a ok"}) {
		t.Fatalf("rejection events = %v; want a accepted again", got)
	}

	// Refused, then the Service changes: the new version is published (to be tried).
	tr.RecordKernelRefusal(keyOf("a"), tried, refusal)
	tr.UpsertEndpointSlice(sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4,
		[]discoveryv1.EndpointPort{slicePortFixture("http", 8080)}, epFixture{addr: "10.244.0.1"}))
	s := tr.Service(keyOf("a"))
	if s == nil || s.Rejected != nil || len(s.Ports[0].Endpoints) != 1 {
		t.Fatalf("after a change the model is %+v; want the new accepted version", s)
	}
	rec.take()
	tr.RetryRefused()
	if got := tr.Service(keyOf("a")); got != s {
		t.Fatalf("RetryRefused after a change published %+v; want the changed model kept", got)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("RetryRefused after a change reported %v; want nothing left refused", got)
	}
	tr.TakeChanges()

	// A refusal of a version that is no longer current is stale: ignored.
	tr.RecordKernelRefusal(keyOf("a"), tried, refusal)
	if s := tr.Service(keyOf("a")); s == nil || s.Rejected != nil {
		t.Fatalf("a stale refusal rejected the current model: %+v", s)
	}
}
