package proxier

import (
	"context"
	"fmt"
	"time"

	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// What one Service may cost a sync (costs in fragment.Fragment.Cost's unit: kernel objects,
// in elements' worth). A sync is one kernel transaction, and the kernel installs it under one
// lock: while it does, no other change reaches packets. So the cost of each Service is bounded
// (above the bound it is rejected with model.ReasonCostLimit), and a Service whose change may
// be expensive is committed in a transaction of its own, after everybody else's.
const (
	// DefaultMaxServiceCost is the default of --max-service-cost: 5000 endpoints (Kubernetes'
	// tested limit per Service) on 10 ports, or a kernel commit of well under a second
	// (bench/README.md, "What one Service costs"). A per-Service bound rather than a share of
	// each sync: whether a Service is programmed must not depend on what else happened to
	// change in the same sync, and the message can say what to change.
	DefaultMaxServiceCost = 100_000
	// isolateCost: a change that may cost more (its new fragment's or its old one's, whichever
	// is larger) is committed in its own transaction, after the sync's other changes (several
	// such changes: one transaction each, first come first, in the same sync, so that a sync
	// still commits everything it took). Cheaper changes go out together, as one extra
	// transaction would cost more than they do (bench/README.md, "Sizes the code's layout
	// rests on").
	isolateCost = 1024
)

// SetMaxServiceCost sets the bound of one Service's cost (0: none). Call it before Run.
func (p *Proxier) SetMaxServiceCost(n int) { p.maxCost = n }

// place builds key's fragments (s nil: removed) and hands them to the reconciler, unless the
// Service is over the cost bound (then it is taken out and reported) or, with canDefer, its
// change is expensive: then it is queued for a transaction of its own (heavyQ) and built when
// its turn comes. A Service that looks expensive from its model alone is queued before it is
// built, so that building it does not delay the cheap changes' transaction either.
func (p *Proxier) place(key model.ServiceKey, s *model.Service, canDefer bool) {
	if canDefer && (p.heldCost(key) > p.isolate || endpointSlots(s) > p.isolate) {
		p.queueHeavy(key)
		return
	}
	cost := 0
	for i, b := range p.builders {
		p.frags[i] = b.ServiceScratch(p.node, s)
		cost += p.frags[i].Cost()
	}
	p.trace.cost(key, cost)
	if OverCost(key, cost, p.maxCost) != nil {
		p.overCost(key, s, cost)
		return
	}
	if canDefer && cost > p.isolate {
		p.queueHeavy(key) // built again when its turn comes: the scratch holds one Service
		return
	}
	p.stage(key, s)
	for i, b := range p.builders {
		p.rec.Set(b.Table(), reconciler.Owner(key), p.frags[i])
	}
}

// heldCost is the cost of what the reconciler holds of key, every family: what removing or
// replacing it may cost.
func (p *Proxier) heldCost(key model.ServiceKey) int {
	n := 0
	for _, b := range p.builders {
		n += p.rec.HeldCost(b.Table(), reconciler.Owner(key))
	}
	return n
}

// endpointSlots estimates a Service's cost from its model: a slot and a hairpin element per
// endpoint and port, the bulk of every large Service.
func endpointSlots(s *model.Service) int {
	if s == nil || s.Rejected != nil {
		return 0
	}
	n := 0
	for i := range s.Ports {
		n += 2 * len(s.Ports[i].Endpoints)
	}
	return n
}

func (p *Proxier) queueHeavy(key model.ServiceKey) {
	if !p.heavyIn[key] {
		p.heavyIn[key] = true
		p.heavyQ = append(p.heavyQ, key)
	}
}

// ServiceCost is what s costs in every builder's family, as the sync loop counts it (render
// applies the same bound).
func ServiceCost(builders []*ruleset.Builder, node *model.Node, s *model.Service) int {
	n := 0
	for _, b := range builders {
		f := b.Service(node, s)
		n += f.Cost()
	}
	return n
}

// OverCost is the rejection of Service key of the given cost under the bound limit (0: none),
// nil when it fits.
func OverCost(key model.ServiceKey, cost, limit int) *model.Rejection {
	if limit <= 0 || cost <= limit {
		return nil
	}
	return &model.Rejection{Reason: model.ReasonCostLimit, Message: fmt.Sprintf(
		"service %s: its rules would cost the kernel %d objects (chains, rules and elements; a named set counts %d), over the limit of %d (--max-service-cost); it is not programmed, every other Service is; split the Service or raise --max-service-cost",
		key, cost, fragment.SetCost, limit)}
}

// overCost takes key's Service out of the ruleset and reports it with ReasonCostLimit.
func (p *Proxier) overCost(key model.ServiceKey, s *model.Service, cost int) {
	for _, b := range p.builders {
		p.rec.Set(b.Table(), reconciler.Owner(key), fragment.Fragment{})
	}
	p.stage(key, nil)
	r := OverCost(key, cost, p.maxCost)
	if rf, ok := p.src.(Refuser); ok {
		rf.RecordKernelRefusal(key, s, r)
		return
	}
	p.log.Info("service rejected: not programmed", "service", key.String(), "reason", r.Reason, "message", r.Message)
}

// deferStarts moves the change starts of queued expensive Services out of starts, to be
// measured when their own transaction commits.
func (p *Proxier) deferStarts(starts map[model.ServiceKey][]time.Time) {
	for k := range p.heavyIn {
		if ts, ok := starts[k]; ok {
			p.heavyStarts[k] = append(p.heavyStarts[k], ts...)
			delete(starts, k)
		}
	}
}

// forgetHeavy empties the queue (every Service was just handed over: setAll), returning the
// change starts it held.
func (p *Proxier) forgetHeavy(starts map[model.ServiceKey][]time.Time) map[model.ServiceKey][]time.Time {
	if len(p.heavyStarts) > 0 && starts == nil {
		starts = map[model.ServiceKey][]time.Time{}
	}
	for k, ts := range p.heavyStarts {
		starts[k] = append(ts, starts[k]...)
	}
	p.heavyQ, p.heavyIn, p.heavyStarts = nil, map[model.ServiceKey]bool{}, map[model.ServiceKey][]time.Time{}
	return starts
}

// commitHeavy commits the first queued expensive Service in a transaction of its own, built
// from the Service's model now. On failure it stays first in the queue (its fragment is
// already handed over, so the next sync's first commit carries it; its turn then only measures
// its latency).
func (p *Proxier) commitHeavy(ctx context.Context, limit int) (model.ServiceKey, reconciler.Result, error) {
	key := p.heavyQ[0]
	s := p.src.Service(key)
	p.tried = map[model.ServiceKey]*model.Service{key: s}
	p.place(key, s, false)
	res, err := p.commit(ctx, false, limit)
	if err != nil {
		return key, res, err
	}
	p.heavyQ = p.heavyQ[1:]
	delete(p.heavyIn, key)
	return key, res, nil
}

// addResult sums two commits of one sync.
func addResult(a, b reconciler.Result) reconciler.Result {
	a.Full = a.Full || b.Full
	a.Ops += b.Ops
	a.Repairs += b.Repairs
	a.AffinityPruned += b.AffinityPruned
	a.CleanupFailed = append(a.CleanupFailed, b.CleanupFailed...)
	a.Stats.Ops += b.Stats.Ops
	a.Stats.Messages += b.Stats.Messages
	a.Stats.Bytes += b.Stats.Bytes
	a.Stats.Duration += b.Stats.Duration
	if b.Objects != nil {
		a.Objects = b.Objects
	}
	return a
}
