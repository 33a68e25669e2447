// Package reconciler keeps the kernel's nftproxy tables equal to the desired ruleset with as
// little work as possible. Owners (the base layout, each Service) hand in their fragments; a
// Commit sends only what changed since the last successful one, as one transaction for both
// families. A full Commit reads the kernel back first and repairs whatever differs (start-up,
// periodic resync, after a failure).
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
)

// StaleChainDelay is how long a chain that is no longer wanted stays (flushed, unreferenced)
// before it is deleted in a later transaction. Kernels before 6.2 may still count a reference
// from a map element deleted in the same transaction and refuse the delete with EBUSY; waiting a
// second, as upstream kube-proxy does, is safe everywhere.
const StaleChainDelay = time.Second

// Result describes one Commit.
type Result struct {
	Full  bool
	Ops   int // operations sent (0: nothing to do)
	Stats nft.Stats
	// Repairs counts, on a full Commit, operations that corrected a kernel state that differed
	// from what was last applied (drift: an operator's `nft flush ruleset`, a deleted element).
	Repairs int
	// AffinityPruned counts the entries of dynamic maps deleted after the Commit because they
	// pointed at endpoints no rule records any more (affinity.go).
	AffinityPruned int
	// CleanupFailed lists the families whose after-commit cleanup (that pruning: a transaction of
	// its own after the sync's) failed; it is tried again after the next Commit.
	CleanupFailed []nft.Family
	// Objects gives the desired object counts per family after the Commit.
	Objects map[nft.Family]Counts
}

// Counts are the number of objects of one table.
type Counts struct{ Chains, Rules, Sets, Elements int }

type table struct {
	t      nft.Table
	owners map[Owner]*ownerRecord
	// chainOwner and setOwner name the owner of each desired chain and set, so that a refused
	// op can be traced to the Service it came from (elements carry theirs in the index).
	// Kept up to date by Set: the cost is the fragment's, never the table's.
	chainOwner, setOwner map[string]Owner
	chainRefs            map[string]int // owners declaring each desired chain
	desired              *desiredIndex
	applied              *appliedIndex // nil: unknown, read the kernel on the next Commit
	dirty                keys
	stale                map[string]time.Time // chains flushed because nobody wants them, and since when
	rec                  recorded             // data the desired rules record into dynamic maps (affinity.go)
}

// Reconciler is owned by one goroutine (the sync loop); it is not safe for concurrent use.
type Reconciler struct {
	kernel nft.Interface
	log    logr.Logger
	now    func() time.Time
	tables []*table
	buf    []byte // Set packs each element here first
}

// New returns a Reconciler for the given tables (one per family). now is the clock (time.Now).
func New(kernel nft.Interface, log logr.Logger, now func() time.Time, tables ...nft.Table) *Reconciler {
	r := &Reconciler{kernel: kernel, log: log, now: now}
	for _, t := range tables {
		r.tables = append(r.tables, &table{t: t, owners: map[Owner]*ownerRecord{},
			chainOwner: map[string]Owner{}, setOwner: map[string]Owner{}, chainRefs: map[string]int{},
			desired: newDesiredIndex(), dirty: newKeys(), stale: map[string]time.Time{}, rec: newRecorded()})
	}
	return r
}

func (r *Reconciler) table(t nft.Table) *table {
	for _, tb := range r.tables {
		if tb.t == t {
			return tb
		}
	}
	panic(fmt.Sprintf("reconciler: table %s was not given to New", t))
}

// Set records owner's fragment in table t (replacing its previous one). An empty fragment
// removes the owner. Nothing reaches the kernel before Commit.
func (r *Reconciler) Set(t nft.Table, owner Owner, f fragment.Fragment) {
	tb := r.table(t)
	old := tb.owners[owner]
	if old == nil {
		old = &ownerRecord{}
	}
	rec := &ownerRecord{}
	if len(f.Chains)+len(f.Sets)+len(f.Elements)+len(f.Recorded) == 0 {
		delete(tb.owners, owner)
	} else {
		tb.owners[owner] = rec
	}
	// Declared recordings: the new ones counted first, so data both versions declare never
	// counts as lost.
	rec.recorded = recordedKeys(f.Recorded)
	tb.rec.declared(rec.recorded, 1)
	tb.rec.declared(old.recorded, -1)
	d := tb.desired
	// A chain several owners declare (the layout's shared pick chains) stays while any of them
	// wants it: chainRefs counts the owners declaring each name. Their definitions are the same
	// function of the name; the last one set wins.
	newChains := make(map[string]bool, len(f.Chains))
	for i := range f.Chains {
		c := f.Chains[i]
		if newChains[c.Chain.Name] {
			continue // declared twice by this owner: count it once
		}
		newChains[c.Chain.Name] = true
		rec.chains = append(rec.chains, c.Chain.Name)
		if !old.declares(c.Chain.Name) {
			tb.chainRefs[c.Chain.Name]++
			if _, ok := tb.chainOwner[c.Chain.Name]; !ok {
				tb.chainOwner[c.Chain.Name] = owner
			}
		}
		if cur, ok := d.chains[c.Chain.Name]; !ok || !sameChain(&cur.Chain, &c.Chain) || !sameRules(cur.Rules, c.Rules) {
			tb.rec.chain(&c, 1) // first: data both versions record never counts as lost
			tb.rec.chain(cur, -1)
			d.putChain(&c)
			tb.dirty.chains[c.Chain.Name] = true
		}
	}
	oldChains := make(map[string]bool, len(old.chains))
	for _, n := range old.chains {
		if newChains[n] || oldChains[n] {
			continue
		}
		oldChains[n] = true
		if tb.chainRefs[n]--; tb.chainRefs[n] > 0 {
			if tb.chainOwner[n] == owner {
				tb.chainOwner[n] = tb.anotherChainOwner(n, owner)
			}
			continue
		}
		delete(tb.chainRefs, n)
		delete(tb.chainOwner, n)
		tb.rec.chain(d.chains[n], -1)
		d.delChain(n)
		tb.dirty.chains[n] = true
	}
	newSets := map[string]bool{}
	for i := range f.Sets {
		s := f.Sets[i]
		newSets[s.Name] = true
		rec.sets = append(rec.sets, s.Name)
		tb.setOwner[s.Name] = owner
		if cur, ok := d.sets[s.Name]; !ok || !sameSet(cur, &s) {
			d.putSet(&s)
			tb.dirty.sets[s.Name] = true
		}
	}
	for _, n := range old.sets {
		if !newSets[n] {
			if tb.setOwner[n] == owner {
				delete(tb.setOwner, n)
			}
			d.delSet(n)
			tb.dirty.sets[n] = true
		}
	}
	// Elements: add the new references before dropping the old, so an element both fragments
	// hold never leaves the desired state.
	// While the kernel's state is unknown the next Commit diffs every element anyway: listing
	// each one as dirty would only cost (a first sync sets hundreds of thousands).
	// Each element is packed into a reused buffer, looked up and compared there: only a new
	// or changed element allocates (its packing, once).
	track := tb.applied != nil
	rec.elems = make([]*elemEntry, 0, len(f.Elements))
	for i := range f.Elements {
		var n int
		r.buf, n = nft.AppendPacked(r.buf[:0], &f.Elements[i])
		if cur, ok := d.elems.getBytes(r.buf[:n]); ok {
			cur.refs++
			if cur.el.String() != string(r.buf) {
				tb.letGo(cur.ID(), cur)
				cur = cur.replace(nft.PackedFrom(r.buf, n))
				d.elems.put(cur)
				if track {
					tb.dirty.elems[cur.ID()] = true
				}
			}
			rec.elems = append(rec.elems, cur)
			continue
		}
		cur := &elemEntry{el: nft.PackedFrom(r.buf, n), refs: 1}
		rec.elems = append(rec.elems, cur)
		d.putElem(cur)
		if track {
			tb.dirty.elems[cur.ID()] = true
		}
	}
	for _, oe := range old.elems {
		id := oe.ID()
		if cur, ok := d.elems.get(id); ok {
			if cur.refs--; cur.refs <= 0 {
				tb.letGo(id, cur)
				d.delElem(id)
			}
			if track {
				tb.dirty.elems[id] = true
			}
		}
	}
}

// Owners lists the owners of table t, sorted by their String (the base layout first).
func (r *Reconciler) Owners(t nft.Table) []Owner {
	type named struct {
		o Owner
		s string
	}
	all := make([]named, 0, len(r.table(t).owners))
	for o := range r.table(t).owners {
		all = append(all, named{o, o.String()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].s < all[j].s })
	out := make([]Owner, len(all))
	for i, n := range all {
		out[i] = n.o
	}
	return out
}

// PendingCleanup reports whether chains await deletion; the caller should Commit again after
// StaleChainDelay even if nothing else changes.
func (r *Reconciler) PendingCleanup() bool {
	for _, tb := range r.tables {
		if len(tb.stale) > 0 {
			return true
		}
	}
	return false
}

// Invalidate forgets what the kernel is believed to hold: the next Commit reads it back.
func (r *Reconciler) Invalidate() {
	for _, tb := range r.tables {
		tb.applied = nil
	}
}

// Commit sends what changed as one transaction. With full, or when the kernel state is unknown
// (first Commit, after a failure of unknown extent), it reads the kernel back and diffs
// everything. On error the kernel is unchanged (the transaction is atomic). When the kernel
// named the op it refused, the error is a *RefusedError naming that op's owner (if one owns it)
// and what changed stays pending for the next Commit, which may stay partial; any other failure
// makes the next Commit a full one.
func (r *Reconciler) Commit(ctx context.Context, full bool) (Result, error) {
	res := Result{Objects: map[nft.Family]Counts{}}
	for _, tb := range r.tables {
		if full || tb.applied == nil {
			res.Full = true
		}
	}
	tx := nft.NewTransaction(r.tables[0].t)
	plans := make([]*plan, len(r.tables))
	for i, tb := range r.tables {
		var believed *appliedIndex
		if res.Full {
			believed = tb.applied
			var link *desiredIndex
			if believed == nil {
				link = tb.desired // no applied index marks it
			}
			kernel, err := r.readBack(ctx, tb.t, link)
			if err != nil {
				return res, err
			}
			tb.applied = kernel
		}
		ks := tb.dirty
		if res.Full {
			ks = allKeys(&tb.desired.objects, &tb.applied.objects)
		}
		plans[i] = r.plan(tb, ks)
		if res.Full && believed != nil {
			res.Repairs += countDrift(believed, tb.applied)
		}
	}
	n := 0
	for _, p := range plans {
		n += p.ops()
	}
	tx.Grow(n)
	for _, p := range plans {
		p.emit(tx)
	}
	res.Ops = tx.Len()
	if res.Ops > 0 {
		st, err := r.kernel.Apply(ctx, tx)
		res.Stats = st
		if err != nil {
			// The kernel layer's error already says "apply transaction (N ops)".
			var oe *nft.OpError
			if !errors.As(err, &oe) || oe.Index < 0 || oe.Index >= tx.Len() {
				r.Invalidate() // the kernel's state is unknown: read it back next time
				return res, err
			}
			// The kernel named the op it refused and aborted the whole batch: it holds what it
			// held, so what we believe it holds stays true and the next Commit may be partial.
			// After a full Commit, "what changed" is every key: keep them pending, so the next
			// Commit still repairs the drift this one found, without reading the kernel again.
			if res.Full {
				for i, tb := range r.tables {
					tb.dirty = plans[i].keys
				}
			}
			return res, r.refusedError(tx, oe, err)
		}
	}
	for i, tb := range r.tables {
		plans[i].commit(tb, r.now())
		tb.dirty = newKeys()
		c, rl, s, e := tb.desired.counts()
		res.Objects[tb.t.Family] = Counts{Chains: c, Rules: rl, Sets: s, Elements: e}
	}
	// After the commit, so no rule records a lost endpoint any more while its entries go.
	// A failure here costs stickiness only: it is logged and tried again after the next Commit.
	n, failed, err := r.pruneAffinity(ctx, res.Full)
	res.AffinityPruned, res.CleanupFailed = n, failed
	if err != nil {
		r.log.Error(err, "delete affinity entries of removed endpoints (retried after the next sync)")
	} else if n > 0 {
		r.log.V(1).Info("deleted affinity entries of removed endpoints", "entries", n)
	}
	return res, nil
}

// readBack reads table t back into an applied index. With link (t's desired index, when no
// applied index holds marks on it: a start or restart), the index is linked to it as it is read:
// an element the kernel holds exactly as desired only marks its entry, and the index keeps the
// others alone, so a restart does not hold a second copy of a table the kernel already has.
func (r *Reconciler) readBack(ctx context.Context, t nft.Table, link *desiredIndex) (*appliedIndex, error) {
	ix := newAppliedIndex()
	pd, packed := r.kernel.(nft.PackedDumper)
	if link != nil && packed {
		link.elems.each(func(e *elemEntry) { e.applied = false })
		ix.linked = link
	}
	var rs *nft.Ruleset
	var err error
	if packed {
		rs, err = pd.DumpPacked(ctx, t, ix.putRead)
	} else {
		rs, err = r.kernel.Dump(ctx, t)
	}
	if nft.IsNotFound(err) {
		return ix, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read back table %s: %w", t, err)
	}
	ix.addDump(rs)
	return ix, nil
}
