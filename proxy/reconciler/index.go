package reconciler

import (
	"reflect"

	"github.com/nftproxy/nftproxy/nft"
)

// elemEntry is one element and how many owners want it (a ClusterIP with several ports, an
// endpoint behind several Services).
type elemEntry struct {
	// el is never changed in place: a new value gets a new pointer, so the desired and the
	// applied index share one copy of every element they agree on.
	el *nft.Element
	// id is the index's key, kept so that owners' records share its bytes.
	id string
	// refs counts the owners that want the element (int32 keeps the entry in 64 bytes).
	refs int32
	// shared is set once an owner other than owner (the first that wanted it, desired index
	// only) wants it too, and then the owners are found by looking (see ownerOf).
	shared bool
	owner  Owner
}

// index is one table's objects, by name: what we want (desired) or what the kernel holds
// (applied).
type index struct {
	chains map[string]*ChainDef
	sets   map[string]*nft.Set
	elems  map[string]*elemEntry // by ElementID
	// perSet counts the elements of each set (a second map of every element's ID cost as much
	// as the index itself: the few lookups by set scan elems, see eachInSets); refs lists, per
	// set, the chains whose rules name it.
	perSet map[string]int
	refs   map[string]map[string]bool
}

func newIndex() *index {
	return &index{chains: map[string]*ChainDef{}, sets: map[string]*nft.Set{}, elems: map[string]*elemEntry{},
		perSet: map[string]int{}, refs: map[string]map[string]bool{}}
}

func (ix *index) putChain(c *ChainDef) {
	ix.delChain(c.Chain.Name)
	ix.chains[c.Chain.Name] = c
	for _, r := range c.Rules {
		for _, s := range setsOf(r) {
			if ix.refs[s] == nil {
				ix.refs[s] = map[string]bool{}
			}
			ix.refs[s][c.Chain.Name] = true
		}
	}
}

func (ix *index) delChain(name string) {
	if old, ok := ix.chains[name]; ok {
		for _, r := range old.Rules {
			for _, s := range setsOf(r) {
				delete(ix.refs[s], name)
				if len(ix.refs[s]) == 0 {
					delete(ix.refs, s)
				}
			}
		}
		delete(ix.chains, name)
	}
}

func (ix *index) putSet(s *nft.Set)  { ix.sets[s.Name] = s }
func (ix *index) delSet(name string) { delete(ix.sets, name) }

func (ix *index) isDynamic(set string) bool {
	s, ok := ix.sets[set]
	return ok && s.Dynamic
}

// putElem sets an element keeping its reference count (1 for a new one) and returns its entry.
// e must not change afterwards.
func (ix *index) putElem(id string, e *nft.Element) *elemEntry {
	if cur, ok := ix.elems[id]; ok {
		cur.el = e
		return cur
	}
	cur := &elemEntry{el: e, id: id, refs: 1}
	ix.elems[id] = cur
	ix.perSet[e.Set]++
	return cur
}

// eachInSets calls fn for every element of the named sets: one scan of the index, and none
// when those sets hold nothing (a new set, or one the packet path fills). fn may delete the
// element it is given.
func (ix *index) eachInSets(sets map[string]bool, fn func(id string, e *elemEntry)) {
	some := false
	for n := range sets {
		if ix.perSet[n] > 0 {
			some = true
		}
	}
	if !some {
		return
	}
	for id, e := range ix.elems {
		if sets[e.el.Set] {
			fn(id, e)
		}
	}
}

// cloneElement copies an element for an index, so the caller's fragment can be dropped (the
// key and data slices are shared: nobody changes them).
func cloneElement(e *nft.Element) *nft.Element {
	c := *e
	return &c
}

func (ix *index) delElem(id string) {
	if cur, ok := ix.elems[id]; ok {
		if ix.perSet[cur.el.Set]--; ix.perSet[cur.el.Set] <= 0 {
			delete(ix.perSet, cur.el.Set)
		}
		delete(ix.elems, id)
	}
}

// setsOf names the sets and maps a rule refers to.
func setsOf(r nft.Rule) []string {
	var out []string
	for _, e := range r.Exprs {
		switch x := e.(type) {
		case nft.CmpSet:
			out = append(out, x.Set)
		case nft.VMap:
			out = append(out, x.Map)
		case nft.DNATNumgen:
			out = append(out, x.Map)
		case nft.SetUpdate:
			out = append(out, x.Set)
		}
	}
	return out
}

// indexFromDump turns a kernel read-back into an index. Rule handles are kept on the rules (they
// are ignored when comparing) so single stray rules could be deleted.
func indexFromDump(rs *nft.Ruleset) *index {
	ix := newIndex()
	byChain := map[string][]nft.Rule{}
	for _, r := range rs.Rules {
		byChain[r.Chain] = append(byChain[r.Chain], r)
	}
	for _, c := range rs.Chains {
		ix.putChain(&ChainDef{Chain: c, Rules: byChain[c.Name]})
	}
	for i := range rs.Sets {
		s := rs.Sets[i]
		ix.putSet(&s)
	}
	for _, els := range rs.Elements {
		for i := range els {
			ix.putElem(ElementID(&els[i]), &els[i])
		}
	}
	return ix
}

func (ix *index) counts() (chains, rules, sets, elems int) {
	for _, c := range ix.chains {
		rules += len(c.Rules)
	}
	return len(ix.chains), rules, len(ix.sets), len(ix.elems)
}

func sameChain(a, b *nft.Chain) bool { return reflect.DeepEqual(a.Base, b.Base) }

// sameRules compares rule lists ignoring kernel handles.
func sameRules(a, b []nft.Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		x.Handle, y.Handle = 0, 0
		if len(x.Exprs) == 0 && len(y.Exprs) == 0 {
			x.Exprs, y.Exprs = nil, nil
		}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func sameSet(a, b *nft.Set) bool {
	x, y := *a, *b
	if len(x.Data) == 0 && len(y.Data) == 0 {
		x.Data, y.Data = nil, nil
	}
	return reflect.DeepEqual(x, y)
}

// sameElement compares what an element maps to (its identity is already equal).
func sameElement(a, b *nft.Element) bool {
	if a == b {
		return true
	}
	if len(a.Data)+len(b.Data) > 0 && !reflect.DeepEqual(a.Data, b.Data) {
		return false
	}
	return reflect.DeepEqual(a.Verdict, b.Verdict) && a.Comment == b.Comment && a.Timeout == b.Timeout
}
