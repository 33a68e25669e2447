package k8s

import (
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// fakeClock is a settable clock for rate-limit tests.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

// step is one scan: the model's rejections (by Service name, "" = accepted) and the
// Service objects' UIDs at that moment, time advanced before the scan, and what must result.
type step struct {
	advance     time.Duration
	rejections  map[string]*model.Rejection
	uids        map[string]string
	wantEvents  []string
	wantPending bool
}

func rej(reason, msg string) *model.Rejection { return &model.Rejection{Reason: reason, Message: msg} }

func TestReporterScan(t *testing.T) {
	bad := rej(model.ReasonRangeEndBeforeStart, "service ns/a: range 20-10 ends before it starts")
	worse := rej(model.ReasonUnknownPortName, "service ns/a: no port named rtp")
	note := func(r *model.Rejection) string {
		return "Warning " + r.Reason + " " + r.Message + "; the Service is not programmed, other Services are unaffected"
	}
	part := &model.Rejection{Reason: model.ReasonServiceConflict, Partial: true,
		Message: `service ns/a: port "https" (TCP on 198.51.100.1, port 443) overlaps port "https" (port 443) of service ns/b`}
	partNote := "Warning " + part.Reason + " " + part.Message + "; the rest of the Service is programmed, other Services are unaffected"
	one := map[string]string{"a": "uid-1"}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a rejection is reported once, not on every scan", []step{
			{rejections: map[string]*model.Rejection{"a": bad}, uids: one, wantEvents: []string{note(bad)}},
			{advance: time.Hour, rejections: map[string]*model.Rejection{"a": bad}, uids: one},
		}},
		{"a changed reason waits for the interval, then the latest is sent", []step{
			{rejections: map[string]*model.Rejection{"a": bad}, uids: one, wantEvents: []string{note(bad)}},
			{advance: time.Second, rejections: map[string]*model.Rejection{"a": worse}, uids: one, wantPending: true},
			{advance: time.Minute, rejections: map[string]*model.Rejection{"a": worse}, uids: one, wantEvents: []string{note(worse)}},
		}},
		{"accepted, then rejected again: reported again", []step{
			{rejections: map[string]*model.Rejection{"a": bad}, uids: one, wantEvents: []string{note(bad)}},
			{rejections: map[string]*model.Rejection{"a": nil}, uids: one},
			{rejections: map[string]*model.Rejection{"a": bad}, uids: one, wantEvents: []string{note(bad)}},
		}},
		{"a recreated Service (new UID) with the same mistake is reported after the interval", []step{
			{rejections: map[string]*model.Rejection{"a": bad}, uids: one, wantEvents: []string{note(bad)}},
			{rejections: map[string]*model.Rejection{"a": bad}, uids: map[string]string{"a": "uid-2"}, wantPending: true},
			{advance: time.Minute, rejections: map[string]*model.Rejection{"a": bad}, uids: map[string]string{"a": "uid-2"}, wantEvents: []string{note(bad)}},
		}},
		{"a Service served in part is reported once, as served in part", []step{
			{rejections: map[string]*model.Rejection{"a": part}, uids: one, wantEvents: []string{partNote}},
			{advance: time.Hour, rejections: map[string]*model.Rejection{"a": part}, uids: one},
			{advance: time.Hour, rejections: map[string]*model.Rejection{"a": nil}, uids: one},
		}},
		{"a Service gone from the informer gets no Event", []step{
			{rejections: map[string]*model.Rejection{"a": bad}, uids: map[string]string{}},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := events.NewFakeRecorder(100)
			clock := &fakeClock{t: time.Unix(1_000_000, 0)}
			var uids map[string]string
			lookup := func(k model.ServiceKey) *corev1.Service {
				uid, ok := uids[k.Name]
				if !ok {
					return nil
				}
				return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name, UID: types.UID(uid)}}
			}
			r := newReporter(rec, lookup, time.Minute, clock.now, logr.Discard())
			for i, st := range tc.steps {
				clock.t = clock.t.Add(st.advance)
				uids = st.uids
				pending := r.scan(snapshotOf(st.rejections))
				got := drain(rec)
				if !slices.Equal(got, st.wantEvents) {
					t.Errorf("step %d: got events %q, want %q", i, got, st.wantEvents)
				}
				if pending != st.wantPending {
					t.Errorf("step %d: got pending %v, want %v", i, pending, st.wantPending)
				}
			}
		})
	}
}

func TestReporterBudget(t *testing.T) {
	rec := events.NewFakeRecorder(2 * MaxEventsPerScan)
	clock := &fakeClock{t: time.Unix(1_000_000, 0)}
	lookup := func(k model.ServiceKey) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name, UID: "u"}}
	}
	r := newReporter(rec, lookup, time.Minute, clock.now, logr.Discard())
	rejections := map[string]*model.Rejection{}
	n := MaxEventsPerScan + 7
	for i := range n {
		rejections[string(rune('a'+i%26))+string(rune('a'+i/26))] = rej(model.ReasonAnnotationSyntax, "bad")
	}
	snap := snapshotOf(rejections)
	if pending := r.scan(snap); !pending {
		t.Errorf("first scan: got pending false, want true (%d rejections, budget %d)", n, MaxEventsPerScan)
	}
	if got := len(drain(rec)); got != MaxEventsPerScan {
		t.Errorf("first scan: got %d events, want %d", got, MaxEventsPerScan)
	}
	if pending := r.scan(snap); pending {
		t.Errorf("second scan: got pending true, want false")
	}
	if got := len(drain(rec)); got != n-MaxEventsPerScan {
		t.Errorf("second scan: got %d events, want %d", got, n-MaxEventsPerScan)
	}
}

func snapshotOf(rejections map[string]*model.Rejection) model.Snapshot {
	s := model.Snapshot{Services: map[model.ServiceKey]*model.Service{}}
	for name, r := range rejections {
		k := model.ServiceKey{Namespace: "ns", Name: name}
		if r != nil && r.Partial {
			s.Services[k] = &model.Service{Key: k, Withheld: r, Ports: []model.ServicePort{{}}}
			continue
		}
		s.Services[k] = &model.Service{Key: k, Rejected: r}
	}
	return s
}

func drain(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// TestReporterSendsKernelRefusals: a Service the kernel refused (recorded in the Tracker by the
// sync loop, not seen by any informer) gets its Event like any other rejection.
func TestReporterSendsKernelRefusals(t *testing.T) {
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-1"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "198.19.0.10", ClusterIPs: []string{"198.19.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}}}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	tr.UpsertService(svc)
	key := model.ServiceKey{Namespace: "ns", Name: "a"}
	refusal := rej(model.ReasonKernelRefused, "service ns/a: the kernel refused its rules")
	tr.RecordKernelRefusal(key, tr.Service(key), refusal)

	rec := events.NewFakeRecorder(10)
	r := newReporter(rec, func(model.ServiceKey) *corev1.Service { return svc }, time.Minute, time.Now, logr.Discard())
	r.scan(tr.Snapshot())
	want := []string{"Warning KernelRefused " + refusal.Message + "; the Service is not programmed, other Services are unaffected"}
	if got := drain(rec); !slices.Equal(got, want) {
		t.Fatalf("events = %q; want %q", got, want)
	}
}
