// Package proxier is the sync step and loop of nftproxy: it takes what changed in the model,
// builds those Services' nftables fragments for each family, and has the reconciler commit the
// difference as one transaction. Run drives it: bursts coalesced, a minimum interval between
// syncs, a periodic full resync that repairs drift, retries with backoff. What must follow the
// committed rules (conntrack cleanup, the health-check node ports) runs as after-commit hooks
// (AddHook), which the proxier calls without knowing what they do.
//
// No Service may hold up the others (cost.go): each Service's fragments are costed as the
// builder made them, a Service over the bound (SetMaxServiceCost) is rejected, and a change
// that may be expensive is committed in a transaction of its own after the sync's other
// changes. A sync over SlowSync is logged with its phases and costliest Services (slow.go).
package proxier

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// Observer receives what the proxier measures; metrics.Proxy implements it. Methods must not
// block.
type Observer interface {
	// Synced reports one sync attempt: full or partial, how long, the result, and err (nil on
	// success).
	Synced(full bool, d time.Duration, res reconciler.Result, err error)
	// Programmed reports, once per change measured, the time from the change's start (the
	// EndpointSlice's trigger time, or when nftproxy recorded the change; see
	// model.Changes.Started) to its rules being committed.
	Programmed(latency time.Duration)
	// Changed reports how many Service changes a sync took.
	Changed(n int)
}

// Source is what the proxier reads the model from (model.Tracker implements it).
type Source interface {
	TakeChanges() model.Changes
	Service(key model.ServiceKey) *model.Service
	Snapshot() model.Snapshot
}

// Refuser is implemented by a Source that reports Services the kernel refused (model.Tracker:
// as rejections, so logs, nftproxy_invalid_services_total and Events report them).
type Refuser interface {
	// RecordKernelRefusal records that the kernel refused tried, the model of key a sync tried.
	RecordKernelRefusal(key model.ServiceKey, tried *model.Service, r *model.Rejection)
	// RetryRefused makes every refused Service a pending change again.
	RetryRefused()
}

// maxRefusals bounds the rounds of one sync that take Services out after kernel refusals (each
// round costs one more attempt at the transaction and takes out every Service the kernel
// refused in it), beyond one per Service it tries again (a full resync retries every refused
// Service). A sync that hits it fails; the next one starts without the Services already taken
// out, so it goes on from there.
const maxRefusals = 8

// maxRefusalText caps the kernel's error quoted in a KernelRefused message (the op is printed
// whole, rules included), so the message fits an Event's note.
const maxRefusalText = 400

// Proxier owns the builders and the reconciler. Sync is not safe for concurrent use; Run calls
// it from one goroutine.
type Proxier struct {
	src      Source
	builders []*ruleset.Builder
	rec      *reconciler.Reconciler
	obs      Observer
	log      logr.Logger
	now      func() time.Time

	hooks []namedHook
	// changed holds the Services staged for commit since the last successful sync, for the
	// hooks (see Commit.Changed).
	changed map[model.ServiceKey]*model.Service

	primed bool // the whole model has been handed to the reconciler once

	// refused holds the Services taken out after the kernel refused them, until they change or
	// the next full sync tries them again; tried maps each Service handed to the reconciler in
	// the current sync to the model it was built from.
	refused      map[model.ServiceKey]bool
	tried        map[model.ServiceKey]*model.Service
	node         *model.Node
	lastSuccess  time.Time
	failingSince time.Time
	retrySince   time.Time // oldest change of a failed sync, for the latency of its retry
	// retryStarts are the change starts of failed syncs, measured when a sync commits them.
	retryStarts map[model.ServiceKey][]time.Time

	maxCost int                 // the bound of one Service's cost (0: none); see cost.go
	isolate int                 // isolateCost (a benchmark compares with one transaction)
	frags   []fragment.Fragment // place's fragments, one per builder
	// heavyQ are the Services whose change waits for a transaction of its own, first come
	// first; heavyIn holds the same keys, heavyStarts their change starts.
	heavyQ      []model.ServiceKey
	heavyIn     map[model.ServiceKey]bool
	heavyStarts map[model.ServiceKey][]time.Time
	trace       syncTrace
	// progress is when the loop last made progress (a commit started or succeeded), in Unix
	// nanoseconds; read by other goroutines (health) through Runner.Status.
	progress atomic.Int64
}

// New returns a Proxier over kernel for the given families' builders.
// Hooks are added with AddHook.
func New(src Source, kernel nft.Interface, builders []*ruleset.Builder, obs Observer, log logr.Logger, now func() time.Time) *Proxier {
	var tables []nft.Table
	for _, b := range builders {
		tables = append(tables, b.Table())
	}
	return &Proxier{src: src, builders: builders, obs: obs, log: log, now: now,
		changed: map[model.ServiceKey]*model.Service{}, rec: reconciler.New(kernel, log, now, tables...),
		refused: map[model.ServiceKey]bool{}, maxCost: DefaultMaxServiceCost, isolate: isolateCost, frags: make([]fragment.Fragment, len(builders)),
		heavyIn: map[model.ServiceKey]bool{}, heavyStarts: map[model.ServiceKey][]time.Time{}}
}

// Sync commits the pending changes (all of the model on the first call). With full it also reads
// the kernel back and repairs any drift, and tries again the Services the kernel refused.
// A Service over the cost bound is rejected; each expensive change is committed after the
// others, in a transaction of its own. On success, everything taken has been committed.
func (p *Proxier) Sync(ctx context.Context, full bool) (reconciler.Result, error) {
	start := p.now()
	p.trace.reset(start)
	retry := full && len(p.refused) > 0
	limit := maxRefusals
	if retry {
		limit += len(p.refused)
	}
	if rf, ok := p.src.(Refuser); ok && retry {
		rf.RetryRefused() // before TakeChanges: they come back as changes of this sync
	}
	ch := p.src.TakeChanges()
	if p.obs != nil && len(ch.Services) > 0 {
		p.obs.Changed(len(ch.Services))
	}
	starts := p.mergeStarts(ch.Started)
	if !p.primed || ch.Node {
		// The node's addresses and zone shape every Service (node ports, topology, source
		// ranges): rebuild them all. Node changes are rare; Service changes stay O(change).
		starts = p.forgetHeavy(starts)
		p.setAll(p.src.Snapshot())
		p.primed = true
	} else {
		keys := ch.Services
		if retry {
			for k := range p.refused {
				keys = append(keys, k)
			}
		}
		p.tried = make(map[model.ServiceKey]*model.Service, len(keys))
		for _, k := range keys {
			s := p.src.Service(k)
			p.tried[k] = s
			delete(p.refused, k)
			p.place(k, s, true)
		}
		p.deferStarts(starts)
	}
	p.trace.phase("build", p.now())
	since := ch.Since
	if !p.retrySince.IsZero() && (since.IsZero() || p.retrySince.Before(since)) {
		since = p.retrySince
	}
	res, err := p.commit(ctx, full, limit)
	p.trace.phase(fmt.Sprintf("commit (%d ops)", res.Ops), p.now())
	if err == nil {
		p.succeeded()
		p.observeProgrammed(starts, since)
		starts, since = nil, time.Time{}
		for err == nil && len(p.heavyQ) > 0 {
			key, hres, herr := p.commitHeavy(ctx, limit)
			p.trace.phase(fmt.Sprintf("own commit of %s (%d ops)", key, hres.Ops), p.now())
			res, err = addResult(res, hres), herr
			if err == nil {
				p.succeeded()
				p.observeProgrammed(map[model.ServiceKey][]time.Time{key: p.heavyStarts[key]}, time.Time{})
				delete(p.heavyStarts, key)
			}
		}
	}
	d := p.now().Sub(start)
	if p.obs != nil {
		p.obs.Synced(res.Full, d, res, err)
	}
	if err != nil {
		p.retrySince, p.retryStarts = since, starts
		if p.failingSince.IsZero() {
			p.failingSince = start
		}
		p.logSlow(d, res.Full, res.Ops, len(ch.Services), err)
		return res, fmt.Errorf("sync (%d changed services): %w", len(ch.Services), err)
	}
	p.failingSince, p.retrySince, p.retryStarts = time.Time{}, time.Time{}, nil
	if res.Repairs > 0 {
		p.log.Info("repaired nftables drift", "objects", res.Repairs)
	}
	p.afterCommit(ctx, res.Full)
	d = p.now().Sub(start)
	p.trace.phase("after-commit hooks", p.now())
	p.logSlow(d, res.Full, res.Ops, len(ch.Services), nil)
	p.log.V(2).Info("synced", "full", res.Full, "ops", res.Ops, "changedServices", len(ch.Services), "duration", d)
	return res, nil
}

// succeeded records a committed transaction.
func (p *Proxier) succeeded() {
	p.lastSuccess = p.now()
	p.progress.Store(p.lastSuccess.UnixNano())
}

// Progress is when the loop last made progress: a transaction was committed or handed to the
// kernel (zero before the first). Safe for concurrent use.
func (p *Proxier) Progress() time.Time {
	if n := p.progress.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// mergeStarts adds the change starts of failed syncs to those of this one.
func (p *Proxier) mergeStarts(starts map[model.ServiceKey][]time.Time) map[model.ServiceKey][]time.Time {
	if len(p.retryStarts) == 0 {
		return starts
	}
	if starts == nil {
		starts = map[model.ServiceKey][]time.Time{}
	}
	for k, ts := range p.retryStarts {
		starts[k] = append(ts, starts[k]...)
	}
	return starts
}

// observeProgrammed reports the programming latency of each change a successful sync
// committed, as upstream kube-proxy does after its sync; a sync of changes no Service carries
// (the Node's, or a source that gives no starts) reports once, from since.
func (p *Proxier) observeProgrammed(starts map[model.ServiceKey][]time.Time, since time.Time) {
	if p.obs == nil {
		return
	}
	for _, ts := range starts {
		for _, at := range ts {
			p.obs.Programmed(p.lastSuccess.Sub(at))
		}
	}
	if len(starts) == 0 && !since.IsZero() {
		p.obs.Programmed(p.lastSuccess.Sub(since))
	}
}

// setAll hands the whole model to the reconciler (first sync, node change). Services gone from
// the model since the last call are removed.
func (p *Proxier) setAll(snap model.Snapshot) {
	p.node = snap.Node
	p.tried = snap.Services
	for k := range p.refused {
		if s := snap.Services[k]; s == nil || s.Rejected == nil || s.Rejected.Reason != model.ReasonKernelRefused {
			delete(p.refused, k) // tried again below
		}
	}
	for _, b := range p.builders {
		p.rec.Set(b.Table(), reconciler.Owner{}, b.Base(snap.Node))
	}
	// One transaction for all: a Service left out would be deleted from the kernel by this
	// full commit (the reconciler would hold no fragment of it) and added again after it.
	for _, s := range snap.Sorted() {
		p.place(s.Key, s, false)
	}
	for _, b := range p.builders {
		t := b.Table()
		for _, o := range p.rec.Owners(t) {
			if k := model.ServiceKey(o); !o.IsBase() && snap.Services[k] == nil {
				p.rec.Set(t, o, fragment.Fragment{})
				p.stage(k, nil)
			}
		}
	}
}

// commit has the reconciler commit, isolating Services whose ops the kernel refuses: the
// Service is taken out (its fragment emptied, as a rejected Service's) and reported, and the
// rest is committed in the same sync. A refusal during a partial commit is first retried as a
// full one: drift (someone deleting what an op relies on) makes the kernel refuse innocent ops,
// and the read-back repairs it at once. A refused op of the base layout, or of no owner, after
// a read-back fails the sync, as does a failure of unknown extent.
// Work beyond one Commit happens only after a refusal.
func (p *Proxier) commit(ctx context.Context, full bool, limit int) (reconciler.Result, error) {
	p.progress.Store(p.now().UnixNano())
	res, err := p.rec.Commit(ctx, full)
	fresh := res.Full // the kernel was read back in this sync
	repairs := 0
	for n := 0; err != nil && reconciler.Refused(err); {
		if res.Full {
			repairs += res.Repairs // found by a Commit that failed; the next one repairs them
		}
		if !fresh {
			res, err = p.rec.Commit(ctx, true)
			fresh = true
			continue
		}
		owner, ok := reconciler.RefusedOwner(err)
		if !ok || owner.IsBase() || n == limit {
			break
		}
		// Every Service with a refused op goes in one round (the kernel reports them all; the
		// base layout never depends on a Service's objects, so none is refused for another's).
		for _, rf := range reconciler.Refusals(err) {
			if !rf.Owner.IsBase() {
				p.refuse(rf.Owner, rf.Err)
			}
		}
		n++
		res, err = p.rec.Commit(ctx, false)
	}
	res.Repairs += repairs
	res.Full = fresh
	return res, err
}

// refuse takes owner's Service out of the ruleset and reports it with ReasonKernelRefused;
// oe is the op of it the kernel refused.
func (p *Proxier) refuse(owner reconciler.Owner, oe *nft.OpError) {
	key := model.ServiceKey(owner)
	for _, b := range p.builders {
		p.rec.Set(b.Table(), owner, fragment.Fragment{})
	}
	p.refused[key] = true
	p.stage(key, nil)
	what := oe.Error() // the refused op and the kernel's reason
	if len(what) > maxRefusalText {
		what = strings.ToValidUTF8(what[:maxRefusalText], "") + "…"
	}
	r := &model.Rejection{Reason: model.ReasonKernelRefused, Message: fmt.Sprintf(
		"service %s: the kernel refused its rules (%s); every other Service was programmed; it is tried again when it changes and at the next full resync", key, what)}
	if rf, ok := p.src.(Refuser); ok {
		tried, ok := p.tried[key]
		if !ok {
			tried = p.src.Service(key) // not handed over in this sync: what the kernel held
		}
		rf.RecordKernelRefusal(key, tried, r)
		return
	}
	p.log.Info("service rejected: not programmed", "service", key.String(), "reason", r.Reason, "message", r.Message)
}

// LastSuccess is when the last sync succeeded (zero before the first). Call it from the sync
// goroutine, or through Runner.Status.
func (p *Proxier) LastSuccess() time.Time { return p.lastSuccess }

// FailingSince is when the current run of failed syncs began (zero when the last one succeeded).
func (p *Proxier) FailingSince() time.Time { return p.failingSince }

// PendingCleanup reports whether a later sync must delete chains that were flushed, or run a
// hook again that has work to retry (Retrier).
func (p *Proxier) PendingCleanup() bool {
	if p.rec.PendingCleanup() {
		return true
	}
	for _, h := range p.hooks {
		if r, ok := h.h.(Retrier); ok && r.RetryPending() {
			return true
		}
	}
	return false
}
