// Package proxier is the sync step and loop of nftproxy: it takes what changed in the model,
// builds those Services' nftables fragments for each family, and has the reconciler commit the
// difference as one transaction. Run drives it: bursts coalesced, a minimum interval between
// syncs, a periodic full resync that repairs drift, retries with backoff.
package proxier

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// baseOwner is the reconciler owner of the fixed layout.
const baseOwner = ""

// Observer receives what the proxier measures; metrics.Proxy implements it. Methods must not
// block.
type Observer interface {
	// Synced reports one sync attempt: full or partial, how long, the result, and err (nil on
	// success).
	Synced(full bool, d time.Duration, res reconciler.Result, err error)
	// Programmed reports the time from the oldest change seen to its rules being committed.
	Programmed(latency time.Duration)
}

// Source is what the proxier reads the model from (model.Tracker implements it).
type Source interface {
	TakeChanges() model.Changes
	Service(key model.ServiceKey) *model.Service
	Snapshot() model.Snapshot
}

// Proxier owns the builders and the reconciler. Sync is not safe for concurrent use; Run calls
// it from one goroutine.
type Proxier struct {
	src      Source
	builders []*ruleset.Builder
	rec      *reconciler.Reconciler
	obs      Observer
	log      logr.Logger
	now      func() time.Time

	primed       bool // the whole model has been handed to the reconciler once
	lastSuccess  time.Time
	failingSince time.Time
	retrySince   time.Time // oldest change of a failed sync, for the latency of its retry
}

// New returns a Proxier over kernel for the given families' builders.
func New(src Source, kernel nft.Interface, builders []*ruleset.Builder, obs Observer, log logr.Logger, now func() time.Time) *Proxier {
	var tables []nft.Table
	for _, b := range builders {
		tables = append(tables, b.Table())
	}
	return &Proxier{src: src, builders: builders, obs: obs, log: log, now: now,
		rec: reconciler.New(kernel, log, now, tables...)}
}

// Sync commits the pending changes (all of the model on the first call). With full it also reads
// the kernel back and repairs any drift.
func (p *Proxier) Sync(ctx context.Context, full bool) (reconciler.Result, error) {
	start := p.now()
	ch := p.src.TakeChanges()
	if !p.primed {
		snap := p.src.Snapshot()
		for _, b := range p.builders {
			p.rec.Set(b.Table(), baseOwner, b.Base(snap.Node))
			for _, s := range snap.Sorted() {
				p.rec.Set(b.Table(), s.Key.String(), b.Service(s))
			}
		}
		p.primed = true
	} else {
		if ch.Node {
			node := p.src.Snapshot().Node
			for _, b := range p.builders {
				p.rec.Set(b.Table(), baseOwner, b.Base(node))
			}
		}
		for _, k := range ch.Services {
			s := p.src.Service(k)
			for _, b := range p.builders {
				p.rec.Set(b.Table(), k.String(), b.Service(s))
			}
		}
	}
	res, err := p.rec.Commit(ctx, full)
	d := p.now().Sub(start)
	if p.obs != nil {
		p.obs.Synced(res.Full, d, res, err)
	}
	since := ch.Since
	if !p.retrySince.IsZero() && (since.IsZero() || p.retrySince.Before(since)) {
		since = p.retrySince
	}
	if err != nil {
		p.retrySince = since
		if p.failingSince.IsZero() {
			p.failingSince = start
		}
		return res, fmt.Errorf("sync (%d changed services): %w", len(ch.Services), err)
	}
	p.lastSuccess = p.now()
	p.failingSince, p.retrySince = time.Time{}, time.Time{}
	if !since.IsZero() && p.obs != nil {
		p.obs.Programmed(p.lastSuccess.Sub(since))
	}
	if res.Repairs > 0 {
		p.log.Info("repaired nftables drift", "objects", res.Repairs)
	}
	p.log.V(2).Info("synced", "full", res.Full, "ops", res.Ops, "changedServices", len(ch.Services), "duration", d)
	return res, nil
}

// LastSuccess is when the last sync succeeded (zero before the first). Call it from the sync
// goroutine, or through Runner.Status.
func (p *Proxier) LastSuccess() time.Time { return p.lastSuccess }

// FailingSince is when the current run of failed syncs began (zero when the last one succeeded).
func (p *Proxier) FailingSince() time.Time { return p.failingSince }

// PendingCleanup reports whether a later sync must delete chains that were flushed.
func (p *Proxier) PendingCleanup() bool { return p.rec.PendingCleanup() }
