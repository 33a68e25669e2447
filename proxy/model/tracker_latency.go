package model

import "time"

// latencyStarts records, for each Service with a pending change, when that change started:
// the trigger times of the EndpointSlice updates that changed it, and when the Tracker first
// recorded its change (the fallback when there is no trigger time). The Tracker's lock guards
// it.
type latencyStarts struct {
	// since is when the Tracker was created: older trigger times are not measured (upstream's
	// trackerStartTime), so a restart does not report the time nftproxy was down.
	since    time.Time
	triggers map[ServiceKey][]time.Time
	receipts map[ServiceKey]time.Time
}

func newLatencyStarts(now time.Time) latencyStarts {
	return latencyStarts{since: now, triggers: map[ServiceKey][]time.Time{}, receipts: map[ServiceKey]time.Time{}}
}

// received records that key changed now, unless a change of it is already pending.
func (l *latencyStarts) received(key ServiceKey, now func() time.Time) {
	if _, ok := l.receipts[key]; !ok {
		l.receipts[key] = now()
	}
}

// triggered records at, the trigger time of an update that changed key. A slice without the
// annotation or with one that does not parse (a zero at), or older than the Tracker, adds
// nothing.
func (l *latencyStarts) triggered(key ServiceKey, at time.Time) {
	if !at.After(l.since) {
		return
	}
	l.triggers[key] = append(l.triggers[key], at)
}

// sliceDeleted forgets key's trigger times, as upstream does: a deleted slice's annotation is
// the time of its last update, not of the deletion, so the deletion is measured from receipt.
func (l *latencyStarts) sliceDeleted(key ServiceKey) { delete(l.triggers, key) }

// take returns when each of the changed Services' changes started and clears the record:
// their trigger times, or the receipt time of a Service that has none.
func (l *latencyStarts) take(changed map[ServiceKey]bool) map[ServiceKey][]time.Time {
	out := make(map[ServiceKey][]time.Time, len(changed))
	for k := range changed {
		if ts := l.triggers[k]; len(ts) > 0 {
			out[k] = ts
		} else if at, ok := l.receipts[k]; ok {
			out[k] = []time.Time{at}
		}
	}
	l.triggers, l.receipts = map[ServiceKey][]time.Time{}, map[ServiceKey]time.Time{}
	return out
}

// published is key's published model (nil if none). A change publishes a new *Service, so
// comparing pointers tells whether an update changed the model.
func (t *Tracker) published(key ServiceKey) *Service {
	if ts := t.services[key]; ts != nil {
		return ts.final
	}
	return nil
}
