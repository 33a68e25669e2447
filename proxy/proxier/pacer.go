package proxier

import "time"

// Adaptive pacing: upstream kube-proxy waits a fixed --min-sync-period (1 s) between syncs
// because its syncs take seconds at scale, and a fixed pause is how it keeps them from eating
// the node. nftproxy's partial syncs take milliseconds, so a fixed second is nearly all of a new
// Service's API→packet time (a new Service is two objects, Service then EndpointSlice: the
// second waits out the period). The adaptive pacer spaces syncs by what they cost instead.
const (
	// paceCostFactor: after a sync of duration d the loop owes paceCostFactor×d of idle time,
	// so under a sustained stream of changes syncs take at most 1/(1+paceCostFactor) of one
	// core (20%).
	paceCostFactor = 4
	// paceBurst is the owed time the loop may carry and still sync after the floor: a few
	// cheap syncs in a row (a Service and then its EndpointSlice) go out at once after an
	// idle spell, as upstream's runner allows a burst of two.
	paceBurst = 100 * time.Millisecond
	// paceFloor is the least time between two syncs: changes arriving within it (the objects
	// of one rollout step) are coalesced into the next sync.
	paceFloor = 5 * time.Millisecond
)

// pacer decides when the next sync may start, from when and how long the earlier ones ran.
// Fixed, it waits period after each sync (kube-proxy's --min-sync-period). Adaptive, it keeps a
// debt of idle time owed (paceCostFactor × each sync's duration, paid back as time passes) and
// waits until the debt is within paceBurst, at least paceFloor and at most period (the
// ceiling: never longer than the fixed period would). A change after an idle spell is synced at
// once; a burst of changes is coalesced into syncs spaced by their cost; an expensive full sync
// is followed by up to period of quiet. Times come in as arguments, so it is tested with a fake
// clock.
type pacer struct {
	fixed  bool
	period time.Duration
	last   time.Time     // end of the last sync (zero before the first)
	debt   time.Duration // idle time owed as of last
}

// ran records a sync that ran from start to end.
func (p *pacer) ran(start, end time.Time) {
	if !p.fixed {
		owed := max(p.debt-start.Sub(p.last), 0) + paceCostFactor*end.Sub(start) // paid back while idle
		// Never owe more than one ceiling beyond the burst: after a full sync that took
		// seconds, the next partial sync waits period, not period after period.
		p.debt = min(owed, paceBurst+p.period)
	}
	p.last = end
}

// gap is the least time from the end of the last sync to the start of the next.
func (p *pacer) gap() time.Duration {
	if p.fixed {
		return p.period
	}
	return min(max(p.debt-paceBurst, paceFloor), p.period)
}

// wait is how long from now until the next sync may start (≤ 0: now).
func (p *pacer) wait(now time.Time) time.Duration {
	if p.last.IsZero() {
		return 0
	}
	return p.gap() - now.Sub(p.last)
}
