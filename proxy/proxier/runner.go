package proxier

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nftproxy/nftproxy/proxy/reconciler"
)

// RunConfig times the sync loop.
type RunConfig struct {
	// MinSyncPeriod bounds the time between two syncs; changes arriving faster are coalesced.
	// By default the wait adapts to what syncs cost (see pacer) and MinSyncPeriod is its
	// ceiling: a change is never held longer than kube-proxy's fixed period would hold it
	// (default 1 s, kube-proxy's default). With FixedSyncPeriod it is the wait after every sync.
	MinSyncPeriod time.Duration
	// FixedSyncPeriod makes MinSyncPeriod the exact least time between two syncs, kube-proxy's
	// meaning of --min-sync-period (0: every change is synced at once): what a user who set
	// the flag asked for.
	FixedSyncPeriod bool
	// FullSyncPeriod is how often the kernel is read back and drift repaired (default 1 h).
	FullSyncPeriod time.Duration
	// MaxBackoff caps the retry delay after failed syncs (default 30 s).
	MaxBackoff time.Duration
	// Ready, when set, holds every sync back until it returns true: the sources must have
	// delivered their initial state, or the first sync would remove every Service the kernel
	// already serves (a blackout on restart). Notify after it turns true.
	Ready func() bool
}

func (c *RunConfig) defaults() {
	if c.MinSyncPeriod < 0 || (c.MinSyncPeriod == 0 && !c.FixedSyncPeriod) {
		c.MinSyncPeriod = time.Second
	}
	if c.FullSyncPeriod <= 0 {
		c.FullSyncPeriod = time.Hour
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
}

// retryBase is the first retry delay after a failed sync and the base of the drift repairs'
// spacing: MinSyncPeriod, or 1 s when a fixed period of 0 asks for no wait between syncs (a
// failing kernel or a writer that keeps flushing must not make the loop spin).
func (c *RunConfig) retryBase() time.Duration {
	if c.MinSyncPeriod <= 0 {
		return time.Second
	}
	return c.MinSyncPeriod
}

// Runner calls Proxier.Sync when poked, paced by what syncs cost (or once per MinSyncPeriod when
// it is fixed), plus a full sync every FullSyncPeriod, retrying failures with exponential
// backoff. It never exits on a failed sync.
type Runner struct {
	p    *Proxier
	cfg  RunConfig
	poke chan struct{}
	// verify is set by SuspectDrift: the next sync reads the kernel back.
	verify atomic.Bool
	// synced is closed after the first successful sync.
	synced chan struct{}

	mu     sync.Mutex
	status Status
}

// Status is the loop's health as other goroutines (the health server) may read it.
type Status struct {
	LastSuccess  time.Time
	FailingSince time.Time
	// Progress is when the loop last made progress: a transaction was committed, or handed to
	// the kernel (so a sync the kernel takes long over is progress, from its start).
	Progress time.Time
}

// Status returns the loop's current health.
func (r *Runner) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.status
	st.Progress = r.p.Progress() // live: it moves during a sync
	return st
}

// NewRunner returns a Runner for p.
func NewRunner(p *Proxier, cfg RunConfig) *Runner {
	cfg.defaults()
	return &Runner{p: p, cfg: cfg, poke: make(chan struct{}, 1), synced: make(chan struct{})}
}

// Notify asks for a sync soon; it never blocks, and many calls before the sync make one.
func (r *Runner) Notify() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// SuspectDrift asks for a full sync soon: someone else changed our tables (an nft.Watcher saw
// it), so the kernel is read back and repaired through the same path as the periodic full
// resync (counted in the Observer's repairs). It never blocks; many calls before the sync make
// one. The pacing still applies, so a writer that keeps flushing cannot make the loop
// spin.
func (r *Runner) SuspectDrift() {
	r.verify.Store(true)
	r.Notify()
}

// Run syncs until ctx is cancelled. The first sync is a full one (read the kernel back, send
// only the differences: no flush-and-rebuild window). The rules stay in the kernel on return.
func (r *Runner) Run(ctx context.Context) {
	var (
		lastSync  time.Time
		lastFull  time.Time
		failures  int
		needFull  = true
		pending   = true
		timer     = time.NewTimer(0)
		firstDone bool
		drift     driftFight
		pace      = pacer{fixed: r.cfg.FixedSyncPeriod, period: r.cfg.MinSyncPeriod}
		base      = r.cfg.retryBase()
	)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.poke:
			pending = true
		case <-timer.C:
		}
		if r.cfg.Ready != nil && !r.cfg.Ready() {
			resetTimer(timer, time.Hour) // a Notify wakes us
			continue
		}
		now := r.p.now()
		if r.verify.Swap(false) {
			drift.suspect(now, r.cfg.MaxBackoff)
		}
		if drift.due(now, base, r.cfg.MaxBackoff) {
			needFull, pending = true, true
		}
		if now.Sub(lastFull) >= r.cfg.FullSyncPeriod {
			needFull, pending = true, true
		}
		if r.p.PendingCleanup() {
			pending = true
		}
		wait := pace.wait(now)
		if failures > 0 {
			wait = backoff(failures, base, r.cfg.MaxBackoff) - now.Sub(lastSync)
		}
		if !pending || wait > 0 {
			resetTimer(timer, min(r.nextWake(pending, wait, now, lastFull), drift.wake(now, base, r.cfg.MaxBackoff)))
			continue
		}
		res, err := r.p.Sync(ctx, needFull)
		lastSync = r.p.now()
		pace.ran(now, lastSync)
		if err == nil && needFull && drift.repaired(res.Repairs, lastSync) {
			r.p.log.Info("another writer keeps changing nftproxy's tables: each repair is undone; drift repairs are spaced out until it stops (check firewall managers, a second proxy, scripts)",
				"repairsInARow", drift.streak, "nextRepairAfter", drift.delay(base, r.cfg.MaxBackoff))
		}
		r.mu.Lock()
		r.status = Status{LastSuccess: r.p.LastSuccess(), FailingSince: r.p.FailingSince()}
		r.mu.Unlock()
		if err != nil {
			failures++
			needFull = true
			if failures == 1 || failures%10 == 0 {
				r.p.log.Error(err, "sync failed; the previous ruleset stays in place", "failures", failures,
					"retryIn", backoff(failures, base, r.cfg.MaxBackoff))
			}
			resetTimer(timer, backoff(failures, base, r.cfg.MaxBackoff))
			continue
		}
		if failures > 0 {
			r.p.log.Info("sync recovered", "afterFailures", failures)
		}
		if needFull {
			lastFull = lastSync
		}
		failures, needFull, pending = 0, false, false
		if !firstDone {
			firstDone = true
			close(r.synced)
		}
		next := min(r.nextWake(false, 0, lastSync, lastFull), drift.wake(lastSync, base, r.cfg.MaxBackoff))
		if r.p.PendingCleanup() {
			next = min(next, reconciler.StaleChainDelay)
		}
		resetTimer(timer, next)
	}
}

// driftFight spaces out repairs when another writer keeps undoing them (a firewall manager
// reloading in a loop, a second proxy with other settings): without it, each side's commit
// would start the other's full sync at once, forever. A repair after a quiet spell runs at
// once; each further one within maxDelay of the last waits twice as long after it, up to
// maxDelay. Ordinary changes are synced meanwhile (partial syncs); only the verification waits.
type driftFight struct {
	streak     int       // repairs in a row, each within maxDelay of the previous
	lastRepair time.Time // when the last one was committed
	suspected  bool      // SuspectDrift was called; the verification is not started yet
	verifying  bool      // the pending full sync is that verification
}

// suspect records a suspicion; a streak older than maxDelay is forgotten.
func (d *driftFight) suspect(now time.Time, maxDelay time.Duration) {
	d.suspected = true
	if d.streak > 0 && now.Sub(d.lastRepair) > maxDelay {
		d.streak = 0
	}
}

// delay is the least time between the last repair and the next verification.
func (d *driftFight) delay(minDelay, maxDelay time.Duration) time.Duration {
	if d.streak == 0 {
		return 0
	}
	return backoff(d.streak+1, minDelay, maxDelay)
}

// due reports whether a suspected drift may be verified now (and marks it started).
func (d *driftFight) due(now time.Time, minDelay, maxDelay time.Duration) bool {
	if !d.suspected || now.Sub(d.lastRepair) < d.delay(minDelay, maxDelay) {
		return false
	}
	d.suspected, d.verifying = false, true
	return true
}

// wake is how long until a suspected drift becomes due (an hour if none is waiting).
func (d *driftFight) wake(now time.Time, minDelay, maxDelay time.Duration) time.Duration {
	if !d.suspected {
		return time.Hour
	}
	return max(d.delay(minDelay, maxDelay)-now.Sub(d.lastRepair), time.Millisecond)
}

// repaired records the result of a successful full sync; it reports true when the streak just
// reached the point worth a log line (the third repair in a row).
func (d *driftFight) repaired(repairs int, now time.Time) bool {
	if !d.verifying {
		return false
	}
	d.verifying = false
	if repairs == 0 {
		d.streak = 0
		return false
	}
	d.streak++
	d.lastRepair = now
	return d.streak == 3
}

// nextWake is how long to sleep: until a pending sync may run, or until the next full resync.
func (r *Runner) nextWake(pending bool, wait time.Duration, now, lastFull time.Time) time.Duration {
	untilFull := r.cfg.FullSyncPeriod - now.Sub(lastFull)
	if pending && wait < untilFull {
		return max(wait, time.Millisecond)
	}
	return max(untilFull, time.Millisecond)
}

func backoff(failures int, base, maxDelay time.Duration) time.Duration {
	d := base
	for i := 1; i < failures && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}

func resetTimer(t *time.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	t.Reset(d)
}
