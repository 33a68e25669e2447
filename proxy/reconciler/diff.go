package reconciler

import (
	"slices"
	"sort"
	"time"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
)

// keys are the names whose desired and applied states may differ. With allElems, every element
// of either index may differ (a full Commit): the element keys are then not listed, since
// listing hundreds of thousands of IDs cost more than the diff itself.
type keys struct {
	chains, sets, elems map[string]bool
	allElems            bool
}

func newKeys() keys {
	return keys{chains: map[string]bool{}, sets: map[string]bool{}, elems: map[string]bool{}}
}

// allKeys lists every chain and set of the indexes, and all their elements.
func allKeys(ixs ...*objects) keys {
	k := newKeys()
	k.allElems = true
	for _, ix := range ixs {
		for n := range ix.chains {
			k.chains[n] = true
		}
		for n := range ix.sets {
			k.sets[n] = true
		}
	}
	return k
}

// eachElem calls fn once per element ID of ks that either index holds (with allElems: every
// element of d, then those only in a), or ks lists, with d's element when d holds it: a full
// Commit visits every element, and looking each one up again cost a map read apiece.
func eachElem(ks keys, d *desiredIndex, a *appliedIndex, fn func(id string, de *elemEntry, inD bool)) {
	if !ks.allElems {
		for id := range ks.elems {
			de, ok := d.elems.get(id)
			fn(id, de, ok)
		}
		return
	}
	d.elems.each(func(de *elemEntry) { fn(de.ID(), de, true) })
	onlyA := func(id string, _ *nft.Packed) {
		if _, ok := d.elems.get(id); !ok {
			fn(id, nil, false)
		}
	}
	if a.linked != d {
		a.each(onlyA)
		return
	}
	a.elems.each(func(el *nft.Packed) { onlyA(el.ID(), el) }) // d's marked entries are in d
}

// plan is the operations for one table, grouped so that emit can order them safely: nothing is
// referenced before it exists, nothing is deleted while something still refers to it.
type plan struct {
	t           nft.Table
	addChains   []nft.Chain
	replChains  []nft.Chain // base chains whose hook or priority changed: flush, delete, add
	flushChains []string
	delElems    []*nft.Packed // the indexes' own elements, never changed: no copies
	delSets     []string
	addSets     []nft.Set
	addElems    []*nft.Packed
	addRules    []nft.Rule
	delChains   []string
	newStale    []string
	keys        keys
	dropSets    map[string]bool // sets deleted or recreated: their applied elements are gone
	added       map[string]bool // sets added or recreated: their elements go in with them
}

func (r *Reconciler) plan(tb *table, ks keys) *plan {
	d, a := tb.desired, tb.applied
	p := &plan{t: tb.t, keys: ks, dropSets: map[string]bool{}}
	flushed := map[string]bool{}
	rewrite := func(name string) { // flush a chain and, if wanted, write its rules again
		if flushed[name] {
			return
		}
		flushed[name] = true
		if _, ok := a.chains[name]; ok {
			p.flushChains = append(p.flushChains, name)
		}
		if dc, ok := d.chains[name]; ok {
			p.addRules = append(p.addRules, dc.Rules...)
		}
	}

	// Sets first: recreating or deleting one forces a rewrite of the chains that refer to it.
	for _, n := range sorted(ks.sets) {
		ds, inD := d.sets[n]
		as, inA := a.sets[n]
		switch {
		case inD && !inA:
			p.addSets = append(p.addSets, *ds)
		case inD && inA && !sameSet(ds, as):
			p.delSets = append(p.delSets, n)
			p.addSets = append(p.addSets, *ds)
			p.dropSets[n] = true
		case !inD && inA:
			p.delSets = append(p.delSets, n)
			p.dropSets[n] = true
		}
	}
	for n := range p.dropSets {
		for _, c := range sortedRefs(&a.objects, n) {
			rewrite(c)
		}
	}

	for _, n := range sorted(ks.chains) {
		dc, inD := d.chains[n]
		ac, inA := a.chains[n]
		switch {
		case inD && !inA:
			p.addChains = append(p.addChains, dc.Chain)
			p.addRules = append(p.addRules, dc.Rules...)
			flushed[n] = true
		case inD && inA && !sameChain(&dc.Chain, &ac.Chain):
			p.replChains = append(p.replChains, dc.Chain)
			p.addRules = append(p.addRules, dc.Rules...)
			flushed[n] = true
		case inD && inA && !sameRules(dc.Rules, ac.Rules):
			rewrite(n)
		case !inD && inA:
			if len(ac.Rules) > 0 {
				rewrite(n)
			}
			p.newStale = append(p.newStale, n)
		}
	}
	now := r.now()
	for n, since := range tb.stale {
		if _, wanted := d.chains[n]; wanted {
			continue
		}
		if ac, ok := a.chains[n]; ok && len(ac.Rules) == 0 && !flushed[n] && now.Sub(since) >= StaleChainDelay {
			p.delChains = append(p.delChains, n)
		}
	}
	sort.Strings(p.delChains)

	// Elements of a set added (or recreated) in this transaction go in with their set, once.
	added := make(map[string]bool, len(p.addSets))
	for _, s := range p.addSets {
		added[s.Name] = true
	}
	if ks.allElems {
		// A full Commit: every desired element the kernel does not hold is added (at start-up,
		// all of them), and growing the list by appending allocated about three times its
		// final size.
		n := d.elems.len()
		for _, c := range a.perSet {
			n -= c
		}
		if n > 0 {
			p.addElems = make([]*nft.Packed, 0, n)
		}
	}
	eachElem(ks, d, a, func(id string, de *elemEntry, inD bool) {
		if inD && (p.dropSets[de.el.Set()] || added[de.el.Set()]) {
			return // handled with the set below
		}
		ae, inA := a.get(id)
		if inA && p.dropSets[ae.Set()] {
			return // handled with the set below
		}
		switch {
		case inD && !inA:
			p.addElems = append(p.addElems, &de.el)
		case inD && inA && !sameElement(&de.el, ae):
			p.delElems = append(p.delElems, ae)
			p.addElems = append(p.addElems, &de.el)
		case !inD && inA:
			if s, ok := a.sets[ae.Set()]; ok && s.Dynamic {
				return // the packet path owns the elements of dynamic sets
			}
			p.delElems = append(p.delElems, ae)
		}
	})
	d.eachInSets(added, func(_ string, e *elemEntry) { p.addElems = append(p.addElems, &e.el) })
	p.added = added
	p.addElems = orderElements(p.addElems, &d.objects)
	p.delElems = orderElements(p.delElems, &a.objects)
	return p
}

// size is the number of operations emit appends (0: none), each element one.
func (p *plan) size() int {
	n := p.objectOps() + len(p.delElems) + len(p.addElems)
	if n == 0 {
		return 0
	}
	return n + 1 // the table's own add
}

// ops is the number of Ops emit appends: all the elements to delete are one (an
// nft.PackedList), all those to add another.
func (p *plan) ops() int {
	if p.size() == 0 {
		return 0
	}
	n := p.objectOps() + 1
	for _, els := range [][]*nft.Packed{p.delElems, p.addElems} {
		if len(els) > 0 {
			n++
		}
	}
	return n
}

// objectOps is the number of operations emit appends on chains, sets and rules.
func (p *plan) objectOps() int {
	return len(p.addChains) + 3*len(p.replChains) + len(p.flushChains) + len(p.delSets) +
		len(p.addSets) + len(p.addRules) + len(p.delChains)
}

// emit appends the plan's operations to tx in a safe order.
func (p *plan) emit(tx *nft.Transaction) {
	if p.size() == 0 {
		return
	}
	tx.Table = p.t
	tx.Add(&nft.TableObj{})
	for i := range p.addChains {
		tx.Add(&p.addChains[i])
	}
	for i := range p.replChains {
		c := p.replChains[i]
		tx.Flush(&nft.Chain{Name: c.Name})
		tx.Delete(&nft.Chain{Name: c.Name})
		tx.Add(&c)
	}
	for _, n := range p.flushChains {
		tx.Flush(&nft.Chain{Name: n})
	}
	if len(p.delElems) > 0 {
		tx.Delete(&nft.PackedList{Elements: p.delElems})
	}
	for _, n := range p.delSets {
		tx.Delete(&nft.Set{Name: n})
	}
	for i := range p.addSets {
		tx.Add(&p.addSets[i])
	}
	// Rules before elements: a rule that binds a map from a chain that has not bound it yet
	// makes the kernel walk every element of the map (nf_tables_bind_set checks each one), so a
	// new chain referring to a large map costs a walk of what is already in it. Added first, it
	// walks only what the map held before this transaction; the elements follow.
	for i := range p.addRules {
		tx.Add(&p.addRules[i])
	}
	// The elements as the indexes hold them, one Op for all (an Op each would be held with the
	// batch until it is sent; bench/README.md, "Memory: peak resident set").
	if len(p.addElems) > 0 {
		tx.Add(&nft.PackedList{Elements: p.addElems})
	}
	for _, n := range p.delChains {
		tx.Delete(&nft.Chain{Name: n})
	}
}

// commit makes the applied index what the kernel now holds, after the transaction succeeded.
func (p *plan) commit(tb *table, now time.Time) {
	d, a := tb.desired, tb.applied
	a.link(d)
	a.eachInSets(p.dropSets, func(id string, _ *nft.Packed) { a.delElem(id) })
	for n := range p.dropSets {
		a.delSet(n)
	}
	for n := range p.keys.sets {
		if s, ok := d.sets[n]; ok {
			a.putSet(s)
		}
	}
	if !p.keys.allElems { // a full Commit's pass below puts every desired element anyway
		d.eachInSets(p.added, func(id string, e *elemEntry) { a.putEntry(id, e) })
	}
	eachElem(p.keys, d, a, func(id string, e *elemEntry, inD bool) {
		if inD {
			a.putEntry(id, e)
		} else if ae, ok := a.get(id); ok && !a.isDynamic(ae.Set()) {
			a.delElem(id)
		}
	})
	if p.keys.allElems {
		// A read-back's table held every element the kernel had, and deletes never shrink it: keep
		// the few that remain (those of dynamic sets) in one of their size.
		rest := newPackedIndex()
		a.elems.each(func(el *nft.Packed) { rest.put(el) })
		a.elems = rest
	}
	copyChain := func(n string) {
		if dc, ok := d.chains[n]; ok {
			a.putChain(dc)
			delete(tb.stale, n)
		}
	}
	for _, c := range p.addChains {
		copyChain(c.Name)
	}
	for _, c := range p.replChains {
		copyChain(c.Name)
	}
	for _, n := range p.flushChains {
		if _, ok := d.chains[n]; ok {
			copyChain(n)
		} else if ac, ok := a.chains[n]; ok {
			a.putChain(&fragment.ChainDef{Chain: ac.Chain})
		}
	}
	for n := range p.keys.chains {
		copyChain(n)
	}
	for _, n := range p.newStale {
		if _, ok := tb.stale[n]; !ok {
			tb.stale[n] = now
		}
	}
	for _, n := range p.delChains {
		a.delChain(n)
		delete(tb.stale, n)
	}
}

// countDrift counts objects whose kernel state (just read back) differs from what we believed
// we had applied.
func countDrift(believed, kernel *appliedIndex) int {
	ks := allKeys(&believed.objects, &kernel.objects)
	n := 0
	for name := range ks.chains {
		bc, inB := believed.chains[name]
		kc, inK := kernel.chains[name]
		if inB != inK || (inB && (!sameChain(&bc.Chain, &kc.Chain) || !sameRules(bc.Rules, kc.Rules))) {
			n++
		}
	}
	for name := range ks.sets {
		bs, inB := believed.sets[name]
		kset, inK := kernel.sets[name]
		if inB != inK || (inB && !sameSet(bs, kset)) {
			n++
		}
	}
	check := func(id string, be *nft.Packed, inB bool) {
		ke, inK := kernel.get(id)
		if (inB && believed.isDynamic(be.Set())) || (inK && kernel.isDynamic(ke.Set())) {
			return
		}
		if inB != inK || (inB && !sameElement(be, ke)) {
			n++
		}
	}
	believed.each(func(id string, be *nft.Packed) { check(id, be, true) })
	kernel.each(func(id string, _ *nft.Packed) {
		if _, ok := believed.get(id); !ok {
			check(id, nil, false)
		}
	})
	return n
}

func sorted(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sortedRefs(ix *objects, set string) []string { return sorted(ix.refs[set]) }

// orderElements groups element ops by set, sets in name order, so the encoder packs each
// set's elements into few messages; within an interval set, in the renderer's canonical order:
// the kernel lists interval-set elements in the order they were added, and a full sync must list
// exactly as `nftproxy render` loaded with nft -f does. Hash sets list in the kernel's own order,
// so their elements keep the order they came in. The grouping is a counting sort by set (linear:
// a comparison sort of a full sync's elements by set name is not); only the
// interval sets' groups are sorted, unpacked once each. It orders pointers: the elements are
// the indexes' own.
func orderElements(els []*nft.Packed, ix *objects) []*nft.Packed {
	if len(els) < 2 {
		return els
	}
	count := map[string]int{}
	last, n := "", 0
	for _, e := range els { // consecutive elements mostly share their set: count runs
		if set := e.Set(); set != last {
			if n > 0 {
				count[last] += n
			}
			last, n = set, 0
		}
		n++
	}
	count[last] += n
	names := make([]string, 0, len(count))
	for name := range count {
		names = append(names, name)
	}
	sort.Strings(names)
	next := make(map[string]int, len(names))
	off := 0
	for _, name := range names {
		next[name] = off
		off += count[name]
	}
	out := make([]*nft.Packed, len(els))
	for _, e := range els {
		set := e.Set()
		j := next[set]
		out[j] = e
		next[set] = j + 1
	}
	off = 0
	for _, name := range names {
		group := out[off : off+count[name]]
		off += count[name]
		if s, ok := ix.sets[name]; ok && s.Interval {
			type unpacked struct {
				el nft.Element
				p  *nft.Packed
			}
			us := make([]unpacked, len(group))
			for i, p := range group {
				us[i] = unpacked{p.Unpack(), p}
			}
			slices.SortStableFunc(us, func(a, b unpacked) int { return nft.CompareElements(a.el, b.el) })
			for i := range us {
				group[i] = us[i].p
			}
		}
	}
	return out
}
