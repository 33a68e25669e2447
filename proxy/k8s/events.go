package k8s

import (
	"context"
	"sort"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// EventAction is the action of every rejection Event: the Service was not programmed.
const EventAction = "NotProgrammed"

// EventActionPartial is the action of an Event about a Service served in part: what it names
// (a port on an address an older Service holds) was not programmed, the rest was.
const EventActionPartial = "PartlyProgrammed"

// MaxEventsPerScan caps the Events one scan sends, so a bad annotation applied to thousands of
// Services at once trickles out instead of flooding the API server; the rest follow on later
// scans.
const MaxEventsPerScan = 50

// eventScheme knows the core types an Event can refer to.
func eventScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = corev1.AddToScheme(s)
	return s
}

// sentEvent is the last Event sent about one Service.
type sentEvent struct {
	rejection model.Rejection
	uid       string
	at        time.Time
}

// reporter turns the Tracker's rejected Services into Events. It is level-triggered: each scan
// compares the rejections the model holds with the Events already sent, so an Event goes out
// once per distinct rejection of a Service object (not on every sync), at most once per
// interval per Service, and a rejection that changed while rate-limited is reported with its
// latest reason once the interval has passed.
type reporter struct {
	rec      events.EventRecorder
	lookup   func(model.ServiceKey) *corev1.Service
	interval time.Duration
	now      func() time.Time
	log      logr.Logger
	sent     map[model.ServiceKey]sentEvent
}

func newReporter(rec events.EventRecorder, lookup func(model.ServiceKey) *corev1.Service, interval time.Duration,
	now func() time.Time, log logr.Logger) *reporter {
	return &reporter{rec: rec, lookup: lookup, interval: interval, now: now, log: log, sent: map[model.ServiceKey]sentEvent{}}
}

// loop scans after each poke, at most once per period, until ctx ends. While some rejection
// waits for its interval it scans again after the period without a poke.
func (r *reporter) loop(ctx context.Context, tr *model.Tracker, poke <-chan struct{}, period time.Duration) {
	pending := r.scan(tr.Snapshot())
	for {
		var retry <-chan time.Time
		if pending {
			retry = time.After(period)
		}
		select {
		case <-ctx.Done():
			return
		case <-poke:
		case <-retry:
		}
		// Coalesce a burst of changes into one scan.
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
		pending = r.scan(tr.Snapshot())
	}
}

// scan sends the Events the snapshot calls for and reports whether some are still held back
// (rate-limited or over MaxEventsPerScan).
func (r *reporter) scan(snap model.Snapshot) (pending bool) {
	now := r.now()
	for key := range r.sent {
		if s := snap.Services[key]; s == nil || reported(s) == nil {
			delete(r.sent, key) // accepted, ignored or deleted: a new rejection is news again
		}
	}
	budget := MaxEventsPerScan
	for _, svc := range rejected(snap) {
		obj := r.lookup(svc.Key)
		if obj == nil {
			continue // deleted since the snapshot
		}
		rej := reported(svc)
		last, seen := r.sent[svc.Key]
		if seen && last.rejection == *rej && last.uid == string(obj.UID) {
			continue
		}
		if seen && now.Sub(last.at) < r.interval || budget == 0 {
			pending = true
			continue
		}
		budget--
		if rej.Partial {
			r.rec.Eventf(obj, nil, corev1.EventTypeWarning, rej.Reason, EventActionPartial,
				"%s; the rest of the Service is programmed, other Services are unaffected", rej.Message)
		} else {
			r.rec.Eventf(obj, nil, corev1.EventTypeWarning, rej.Reason, EventAction,
				"%s; the Service is not programmed, other Services are unaffected", rej.Message)
		}
		r.log.V(2).Info("Event sent for rejected Service", "service", svc.Key.String(), "reason", rej.Reason, "partial", rej.Partial)
		r.sent[svc.Key] = sentEvent{rejection: *rej, uid: string(obj.UID), at: now}
	}
	return pending
}

// reported is what an Event reports of a Service: its rejection, or what it withholds (a
// partial rejection); nil when there is nothing to report.
func reported(s *model.Service) *model.Rejection {
	if s.Rejected != nil {
		return s.Rejected
	}
	return s.Withheld
}

// rejected lists the snapshot's rejected Services, and those served in part, by key: sorting
// only them keeps a scan of a large cluster cheap, and the order decides who goes first when
// the budget runs out.
func rejected(snap model.Snapshot) []*model.Service {
	var out []*model.Service
	for _, s := range snap.Services {
		if reported(s) != nil {
			out = append(out, s)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key.String() < out[j].Key.String() })
	return out
}
