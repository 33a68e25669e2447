package syncs

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/netns"
)

// DriftResult is what MeasureDrift found: how fast `nft flush ruleset` is seen and repaired by
// the daemon's loop (nft.Watcher feeding proxier.Runner, default periods), and what watching
// costs when nothing changes.
type DriftResult struct {
	Services int
	// FirstSync is the first full sync (empty kernel), with the Watcher subscribed; Kernel its
	// kernel time (a batch this large is applied with the Watcher out of the event group).
	FirstSync, FirstSyncKernel time.Duration
	// PlainSync and PlainSyncKernel are the same first sync in another namespace where nothing
	// listens to events (the kernel then builds none), before the daemon's loop starts and
	// again after its first sync (PlainAfter…); ListenedSync in a namespace where another
	// socket listens (as `nft monitor` would), so the kernel builds an event per object: the
	// difference is what events cost.
	PlainSync, PlainSyncKernel           time.Duration
	ListenedSync, ListenedSyncKernel     time.Duration
	PlainAfterSync, PlainAfterSyncKernel time.Duration
	// Overflows counts event-socket overflows (each starts a verification) during the first
	// sync; VerifyAfterFirst is the verification they caused (0 when none).
	Overflows        int
	VerifyAfterFirst time.Duration
	// Idle is how long nothing changed; IdleCPU the process's CPU time (user+system) meanwhile.
	Idle, IdleCPU time.Duration
	// Flush is the `nft flush ruleset` command (fork, exec, commit); Detect from its start to
	// the Watcher's report; Repair from the report to the repairing sync's end (a full sync:
	// read back the now empty kernel, send the whole ruleset); Total from the command's start.
	Flush, Detect, Repair, Total time.Duration
	// RepairOps and RepairKernel are the repairing sync's operations and kernel time; Repairs
	// what it counted as drift.
	RepairOps     int
	RepairKernel  time.Duration
	Repairs       int
	ElementsAfter int // elements of the table after the repair (equal to before it)
	ElementsWant  int
	// OneElement* are the same for one map element deleted by another netlink socket: the
	// repair reads the whole table back to find it and sends one op.
	OneElementDetect, OneElementRepair time.Duration
	OneElementOps                      int
}

// driftObserver records the syncs of the runner under test.
type driftObserver struct {
	mu    sync.Mutex
	syncs []driftSync
	wake  chan struct{}
}

type driftSync struct {
	at  time.Time
	d   time.Duration
	res reconciler.Result
	err error
}

func (o *driftObserver) Synced(full bool, d time.Duration, res reconciler.Result, err error) {
	o.mu.Lock()
	o.syncs = append(o.syncs, driftSync{at: time.Now(), d: d, res: res, err: err})
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}
func (o *driftObserver) Programmed(time.Duration) {}
func (o *driftObserver) Changed(int)              {}

// waitSync returns the first sync after index from that matches, waiting at most limit.
func (o *driftObserver) waitSync(from int, limit time.Duration, match func(driftSync) bool) (driftSync, int, error) {
	deadline := time.After(limit)
	for {
		o.mu.Lock()
		for i := from; i < len(o.syncs); i++ {
			if match(o.syncs[i]) {
				s := o.syncs[i]
				o.mu.Unlock()
				return s, i + 1, nil
			}
		}
		o.mu.Unlock()
		select {
		case <-o.wake:
		case <-deadline:
			return driftSync{}, from, fmt.Errorf("no matching sync within %v", limit)
		}
	}
}

func (o *driftObserver) count() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.syncs)
}

// MeasureDrift programs size Services in a fresh namespace through a Runner with the daemon's
// default periods (1 s minimum, 1 h full resync) and a Watcher, stays idle for idle, then runs
// `nft flush ruleset` and measures until the rules are back. It asserts nothing about time.
func MeasureDrift(ctx context.Context, size, endpoints int, idle time.Duration) (DriftResult, error) {
	res := DriftResult{Services: size}
	w := workload.Generate(workload.DefaultSpec(size, endpoints, 1))
	b, err := NewBuilder()
	if err != nil {
		return res, err
	}
	if res.PlainSync, res.PlainSyncKernel, err = sideSync(ctx, w, b, false); err != nil {
		return res, err
	}
	if res.ListenedSync, res.ListenedSyncKernel, err = sideSync(ctx, w, b, true); err != nil {
		return res, err
	}
	ns, err := netns.Create("nftp-drift")
	if err != nil {
		return res, err
	}
	defer ns.Close()
	k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		return res, err
	}
	defer k.Close()
	watcher, err := nft.NewWatcher([]nft.Table{b.Table()}, k, nft.WithNetNS(ns.Fd()))
	if err != nil {
		return res, err
	}
	defer watcher.Close()
	obs := &driftObserver{wake: make(chan struct{}, 1)}
	p := proxier.New(workload.NewSource(w.Node, w.Services), k, []*ruleset.Builder{b}, obs, logr.Discard(), time.Now)
	runner := proxier.NewRunner(p, proxier.RunConfig{})

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	var (
		mu       sync.Mutex
		reports  []time.Time
		overflow int
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = watcher.Run(ctx, func(f nft.Foreign) {
			mu.Lock()
			reports = append(reports, time.Now())
			if f.Overflow {
				overflow++
			}
			mu.Unlock()
			runner.SuspectDrift()
		})
	}()
	go func() { defer wg.Done(); runner.Run(ctx) }()

	first, next, err := obs.waitSync(0, 10*time.Minute, func(s driftSync) bool { return s.err == nil })
	if err != nil {
		return res, fmt.Errorf("first sync: %w", err)
	}
	res.FirstSync, res.FirstSyncKernel = first.d, first.res.Stats.Duration
	// Let the verification an overflow starts (if any) finish before going idle.
	time.Sleep(2 * time.Second)
	mu.Lock()
	res.Overflows = overflow
	mu.Unlock()
	if res.Overflows > 0 {
		v, n, err := obs.waitSync(next, 10*time.Minute, func(s driftSync) bool { return s.res.Full })
		if err != nil {
			return res, fmt.Errorf("verification after the first sync's overflow: %w", err)
		}
		res.VerifyAfterFirst, next = v.d, n
	}
	if res.PlainAfterSync, res.PlainAfterSyncKernel, err = sideSync(ctx, w, b, false); err != nil {
		return res, err
	}
	want, err := k.Dump(ctx, b.Table())
	if err != nil {
		return res, err
	}
	for _, els := range want.Elements {
		res.ElementsWant += len(els)
	}

	// Idle: nothing commits; the Watcher sleeps in recvmsg. The garbage of the syncs above is
	// collected and its memory returned to the system first (else the runtime's background
	// scavenger, not the Watcher, fills the window).
	debug.FreeOSMemory()
	time.Sleep(time.Second)
	syncsBefore := obs.count()
	u0, s0 := cpuTimes()
	time.Sleep(idle)
	u1, s1 := cpuTimes()
	res.Idle, res.IdleCPU = idle, (u1-u0)+(s1-s0)
	if n := obs.count(); n != syncsBefore {
		return res, fmt.Errorf("%d syncs while idle, want none", n-syncsBefore)
	}

	mu.Lock()
	seen := len(reports)
	mu.Unlock()
	start := time.Now()
	if out, err := ns.Run("nft", "flush", "ruleset"); err != nil {
		return res, fmt.Errorf("nft flush ruleset: %w: %s", err, out)
	}
	res.Flush = time.Since(start)
	rep, _, err := obs.waitSync(next, 10*time.Minute, func(s driftSync) bool { return s.err == nil && s.res.Repairs > 0 })
	if err != nil {
		return res, fmt.Errorf("repair after nft flush ruleset: %w", err)
	}
	mu.Lock()
	if len(reports) == seen {
		mu.Unlock()
		return res, fmt.Errorf("repaired without a Watcher report")
	}
	detected := reports[seen]
	mu.Unlock()
	res.Detect, res.Repair, res.Total = detected.Sub(start), rep.at.Sub(detected), rep.at.Sub(start)
	res.RepairOps, res.RepairKernel, res.Repairs = rep.res.Ops, rep.res.Stats.Duration, rep.res.Repairs
	got, err := k.Dump(ctx, b.Table())
	if err != nil {
		return res, err
	}
	for _, els := range got.Elements {
		res.ElementsAfter += len(els)
	}

	// One element deleted by another writer.
	els := got.Elements[ruleset.MapServiceIPs]
	if len(els) == 0 {
		return res, fmt.Errorf("no %s element to delete", ruleset.MapServiceIPs)
	}
	other, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		return res, err
	}
	defer other.Close()
	del := nft.NewTransaction(b.Table())
	del.Delete(&els[len(els)/2])
	// Past the minimum sync period since the flush's repair, so the Runner does not hold the
	// sync back (that wait is the rate limit, not detection).
	time.Sleep(2 * time.Second)
	mu.Lock()
	seen = len(reports)
	mu.Unlock()
	from := obs.count()
	start = time.Now()
	if _, err := other.Apply(ctx, del); err != nil {
		return res, fmt.Errorf("delete one element: %w", err)
	}
	rep, _, err = obs.waitSync(from, 10*time.Minute, func(s driftSync) bool { return s.err == nil && s.res.Repairs > 0 })
	if err != nil {
		return res, fmt.Errorf("repair after one deleted element: %w", err)
	}
	mu.Lock()
	detected = reports[seen]
	mu.Unlock()
	res.OneElementDetect, res.OneElementRepair, res.OneElementOps = detected.Sub(start), rep.at.Sub(detected), rep.res.Ops
	return res, nil
}

// sideSync is a first full sync of w in a fresh namespace where nothing listens to nftables
// events or, with listen, where a bare Watcher (no own Kernel, draining) listens.
func sideSync(ctx context.Context, w *workload.Workload, b *ruleset.Builder, listen bool) (time.Duration, time.Duration, error) {
	ns, err := netns.Create("nftp-drift-side")
	if err != nil {
		return 0, 0, err
	}
	defer ns.Close()
	k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		return 0, 0, err
	}
	defer k.Close()
	if listen {
		l, err := nft.NewWatcher([]nft.Table{b.Table()}, nil, nft.WithNetNS(ns.Fd()))
		if err != nil {
			return 0, 0, err
		}
		lctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = l.Run(lctx, func(nft.Foreign) {}) }()
		defer func() { cancel(); <-done; l.Close() }()
	}
	p := proxier.New(workload.NewSource(w.Node, w.Services), k, []*ruleset.Builder{b}, nil, logr.Discard(), time.Now)
	start := time.Now()
	res, err := p.Sync(ctx, true)
	return time.Since(start), res.Stats.Duration, err
}

// String is the result as report lines.
func (r DriftResult) String() string {
	return fmt.Sprintf(`drift, %d Services:
  first full sync %v (kernel %v), event-socket overflows during it %d (verification %v)
  the same sync, nothing listening: %v (kernel %v) before, %v (kernel %v) after; another socket listening: %v (kernel %v)
  idle %v: process CPU %v (%.4f%% of one core)
  nft flush ruleset: command %v; detected %v after its start; repaired %v after detection (full sync: %d ops, kernel %v, %d objects counted as drift); total %v
  elements before %d, after repair %d
  one map element deleted by another socket: detected %v after the commit started; repaired %v after detection (%d ops)`,
		r.Services, r.FirstSync.Round(time.Millisecond), r.FirstSyncKernel.Round(time.Millisecond), r.Overflows, r.VerifyAfterFirst.Round(time.Millisecond),
		r.PlainSync.Round(time.Millisecond), r.PlainSyncKernel.Round(time.Millisecond),
		r.PlainAfterSync.Round(time.Millisecond), r.PlainAfterSyncKernel.Round(time.Millisecond),
		r.ListenedSync.Round(time.Millisecond), r.ListenedSyncKernel.Round(time.Millisecond),
		r.Idle, r.IdleCPU, 100*r.IdleCPU.Seconds()/r.Idle.Seconds(),
		r.Flush.Round(time.Millisecond), r.Detect.Round(time.Millisecond), r.Repair.Round(time.Millisecond), r.RepairOps,
		r.RepairKernel.Round(time.Millisecond), r.Repairs, r.Total.Round(time.Millisecond),
		r.ElementsWant, r.ElementsAfter,
		r.OneElementDetect.Round(time.Microsecond), r.OneElementRepair.Round(time.Millisecond), r.OneElementOps)
}
