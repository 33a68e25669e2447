package model

import (
	"reflect"
	"testing"
)

// A Service its source refused (manifest mode's API validation) is a rejected Service like any
// other: one event, a rejected model in the snapshot, no port claims (an older refused Service
// does not win a conflict), and an UpsertService of a fixed version accepts it.
func TestRejectService(t *testing.T) {
	rec := &recorder{}
	tr := newTestTracker(rec)
	refused := &Rejection{Reason: ReasonAPIValidation, Message: "service ns/a: metadata.name: bad"}
	a := svcFixture("a", created(1))
	tr.RejectService(a, refused)
	tr.RejectService(svcFixture("a", created(1)), &Rejection{Reason: ReasonAPIValidation, Message: "service ns/a: metadata.name: bad"})
	if ev := rec.take(); !reflect.DeepEqual(ev, []string{"ns/a APIValidation"}) {
		t.Fatalf("events = %v; want one APIValidation event (the repeat is unchanged)", ev)
	}
	if s := tr.Snapshot().Services[ServiceKey{"ns", "a"}]; s == nil || !reflect.DeepEqual(s.Rejected, refused) || len(s.Ports) != 0 {
		t.Fatalf("snapshot a = %+v; want rejected with the source's rejection, no ports", s)
	}
	// b is newer and on the same IP and port: a refused a claims nothing, so b is accepted.
	tr.UpsertService(svcFixture("b", created(2)))
	if ev := rec.take(); len(ev) != 0 {
		t.Fatalf("events = %v; want none (b accepted, no conflict with the refused a)", ev)
	}
	tr.DeleteService(ServiceKey{"ns", "b"})
	rec.take()
	tr.UpsertService(svcFixture("a", created(1)))
	if ev := rec.take(); !reflect.DeepEqual(ev, []string{"ns/a ok"}) {
		t.Fatalf("events = %v; want a accepted once fixed", ev)
	}
	if s := tr.Service(ServiceKey{"ns", "a"}); s == nil || s.Rejected != nil || len(s.Ports) != 1 {
		t.Fatalf("a = %+v; want accepted with its port", s)
	}
	tr.RejectService(svcFixture("a", created(1)), refused)
	tr.DeleteService(ServiceKey{"ns", "a"})
	if ev := rec.take(); !reflect.DeepEqual(ev, []string{"ns/a APIValidation", "ns/a ok"}) {
		t.Fatalf("events = %v; want refused again, then cleared by the delete", ev)
	}
	if s := tr.Service(ServiceKey{"ns", "a"}); s != nil {
		t.Fatalf("a = %+v after delete; want gone", s)
	}
}
