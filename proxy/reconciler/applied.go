package reconciler

import (
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
)

// appliedIndex is one table's objects and elements as the kernel holds them (as far as we
// know). Once a Commit made it the table's applied index, it is linked to the desired index:
// every element the kernel holds as it is wanted is the desired entry's own, marked applied,
// and elems holds only the others (an element nobody wants any more, a dynamic set's, the old
// value of a change not committed yet), not a map of every element beside the desired one
// (bench/README.md, "Sizes the code's layout rests on"). A read-back of the kernel is
// not linked: elems holds everything it read.
type appliedIndex struct {
	objects
	// elems are the elements held apart from the linked index's marked entries, by ElementID:
	// an ID is in elems or a marked entry, never both.
	elems packedIndex
	// perSet counts the elements of each set, the marked entries included.
	perSet map[string]int
	// linked is the desired index whose entries marked applied are elements of this one too.
	linked *desiredIndex
}

func newAppliedIndex() *appliedIndex {
	return &appliedIndex{objects: newObjects(), elems: newPackedIndex(), perSet: map[string]int{}}
}

// link makes ix the applied index of d, its marked entries ix's elements. Marks left by an
// index ix replaces (one read back on a full Commit) are cleared first: one pass over d, on a
// Commit that visits every element anyway.
func (ix *appliedIndex) link(d *desiredIndex) {
	if ix.linked == d {
		return
	}
	d.elems.each(func(e *elemEntry) { e.applied = false })
	ix.linked = d
}

// marked returns the linked index's entry of id if ix holds its element through it.
func (ix *appliedIndex) marked(id string) (*elemEntry, bool) {
	if ix.linked == nil {
		return nil, false
	}
	e, ok := ix.linked.elems.get(id)
	return e, ok && e.applied
}

func (ix *appliedIndex) get(id string) (*nft.Packed, bool) {
	if el, ok := ix.elems.get(id); ok {
		return el, true
	}
	if e, ok := ix.marked(id); ok {
		return &e.el, true
	}
	return nil, false
}

// each calls fn for every element; fn may delete the element it is given.
func (ix *appliedIndex) each(fn func(id string, el *nft.Packed)) {
	ix.elems.each(func(el *nft.Packed) { fn(el.ID(), el) })
	if ix.linked != nil {
		ix.linked.elems.each(func(e *elemEntry) {
			if e.applied {
				fn(e.ID(), &e.el)
			}
		})
	}
}

// put sets el as the element of its ID. el must not change afterwards.
func (ix *appliedIndex) put(el *nft.Packed) {
	had := !ix.elems.put(el)
	if e, ok := ix.marked(el.ID()); ok {
		e.applied, had = false, true
	}
	if !had {
		ix.perSet[el.Set()]++
	}
}

// putEntry sets the element of id to the linked index's entry e (its current entry of id).
func (ix *appliedIndex) putEntry(id string, e *elemEntry) {
	if ix.linked == nil {
		ix.put(&e.el)
		return
	}
	_, had := ix.elems.get(id)
	if had {
		ix.elems.del(id)
	}
	if !had && !e.applied {
		ix.perSet[e.el.Set()]++
	}
	e.applied = true
}

func (ix *appliedIndex) delElem(id string) {
	el, ok := ix.get(id)
	if !ok {
		return
	}
	countDown(ix.perSet, el.Set())
	ix.elems.del(id)
	if e, ok := ix.marked(id); ok {
		e.applied = false
	}
}

// eachInSets calls fn for every element of the named sets, none when those sets hold nothing.
// fn may delete the element it is given.
func (ix *appliedIndex) eachInSets(sets map[string]bool, fn func(id string, el *nft.Packed)) {
	if !anyCounted(ix.perSet, sets) {
		return
	}
	ix.each(func(id string, el *nft.Packed) {
		if sets[el.Set()] {
			fn(id, el)
		}
	})
}

// letGo is called before the desired index drops or replaces its entry e of id: if the applied
// index holds e's element through it, it keeps the element apart (the kernel still holds it).
func (tb *table) letGo(id string, e *elemEntry) {
	if e.applied && tb.applied != nil && tb.applied.linked == tb.desired {
		tb.applied.elems.put(&e.el)
	}
	e.applied = false
}

// addDump puts a kernel read-back's chains, sets, rules and (from Dump) elements in ix. Rule
// handles are kept on the rules (they are ignored when comparing) so single stray rules could be
// deleted.
func (ix *appliedIndex) addDump(rs *nft.Ruleset) {
	byChain := map[string][]nft.Rule{}
	for _, r := range rs.Rules {
		byChain[r.Chain] = append(byChain[r.Chain], r)
	}
	for _, c := range rs.Chains {
		ix.putChain(&fragment.ChainDef{Chain: c, Rules: byChain[c.Name]})
	}
	for i := range rs.Sets {
		s := rs.Sets[i]
		ix.putSet(&s)
	}
	for _, els := range rs.Elements {
		ps := make([]nft.Packed, len(els)) // one allocation per set for the packings' headers
		for i := range els {
			ps[i] = nft.Pack(&els[i])
			ix.put(&ps[i])
		}
	}
}

// putRead puts an element read back from the kernel in ix. In an index linked as it is read
// (see readBack), an element the kernel holds exactly as the linked index wants it only marks
// that entry.
func (ix *appliedIndex) putRead(p nft.Packed) {
	if ix.linked != nil {
		if e, ok := ix.linked.elems.get(p.ID()); ok && e.el.String() == p.String() {
			if !e.applied {
				e.applied = true
				ix.perSet[p.Set()]++
			}
			return
		}
	}
	q := new(nft.Packed)
	*q = p
	ix.put(q)
}
