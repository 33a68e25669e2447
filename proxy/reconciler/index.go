package reconciler

import (
	"reflect"

	"github.com/nftproxy/nftproxy/nft"
)

// element is what an index holds per element: the desired index's entries (with their owners
// and reference counts) or the applied index's bare elements (the kernel's copy needs neither:
// a second entry per element cost ~64 bytes × every element of the table).
type element interface {
	comparable
	elem() *nft.Element
}

// elemEntry is one desired element and how many owners want it (a ClusterIP with several
// ports, an endpoint behind several Services). The element lives inside its entry (one
// allocation per element, not two). An entry is 144 bytes, a size class of its own: who wants
// the element is not kept here (an Owner is 32 bytes; with it an entry took 176, ~7 MB at 10k
// Services) but found in the owners' records, on the failure path alone (see ownersOf).
type elemEntry struct {
	// el is never changed in place: the applied index points at it once committed, so the
	// desired and the applied index share one copy of every element they agree on. A new value
	// gets a new entry (replace).
	el nft.Element
	// id is the index's key, kept so that owners' records share its bytes.
	id string
	// refs counts the owners that want the element.
	refs int32
}

func (e *elemEntry) elem() *nft.Element { return &e.el }

// replace returns a copy of the entry holding el instead (the old one may be what the kernel
// holds: the applied index points into it).
func (e *elemEntry) replace(el *nft.Element) *elemEntry {
	c := *e
	c.el = *el
	return &c
}

// appliedElem is an element the kernel holds (the applied index): the desired entry's element
// itself once committed, shared, never changed.
type appliedElem nft.Element

func (e *appliedElem) elem() *nft.Element { return (*nft.Element)(e) }

// applied converts an element for the applied index (no copy).
func applied(e *nft.Element) *appliedElem { return (*appliedElem)(e) }

// objects are one table's chains and sets, by name, and which chains name each set.
type objects struct {
	chains map[string]*ChainDef
	sets   map[string]*nft.Set
	// refs lists, per set, the chains whose rules name it.
	refs map[string]map[string]bool
}

// index is one table's objects and elements: what we want (desired, index[*elemEntry]) or what
// the kernel holds (applied, index[*appliedElem]).
type index[E element] struct {
	objects
	elems map[string]E // by ElementID
	// perSet counts the elements of each set (a second map of every element's ID cost as much
	// as the index itself: the few lookups by set scan elems, see eachInSets).
	perSet map[string]int
}

type (
	desiredIndex = index[*elemEntry]
	appliedIndex = index[*appliedElem]
)

func newIndex[E element]() *index[E] {
	return &index[E]{objects: objects{chains: map[string]*ChainDef{}, sets: map[string]*nft.Set{},
		refs: map[string]map[string]bool{}}, elems: map[string]E{}, perSet: map[string]int{}}
}

func (ix *objects) putChain(c *ChainDef) {
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

func (ix *objects) delChain(name string) {
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

func (ix *objects) putSet(s *nft.Set)  { ix.sets[s.Name] = s }
func (ix *objects) delSet(name string) { delete(ix.sets, name) }

func (ix *objects) isDynamic(set string) bool {
	s, ok := ix.sets[set]
	return ok && s.Dynamic
}

// putElem sets the element of id (an applied element replaced, a desired entry added: Set
// changes an existing entry itself). e must not change afterwards.
func (ix *index[E]) putElem(id string, e E) {
	if _, ok := ix.elems[id]; !ok {
		ix.perSet[e.elem().Set]++
	}
	ix.elems[id] = e
}

// eachInSets calls fn for every element of the named sets: one scan of the index, and none
// when those sets hold nothing (a new set, or one the packet path fills). fn may delete the
// element it is given.
func (ix *index[E]) eachInSets(sets map[string]bool, fn func(id string, e E)) {
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
		if sets[e.elem().Set] {
			fn(id, e)
		}
	}
}

func (ix *index[E]) delElem(id string) {
	if cur, ok := ix.elems[id]; ok {
		set := cur.elem().Set
		if ix.perSet[set]--; ix.perSet[set] <= 0 {
			delete(ix.perSet, set)
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
func indexFromDump(rs *nft.Ruleset) *appliedIndex {
	ix := newIndex[*appliedElem]()
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
			ix.putElem(ElementID(&els[i]), applied(&els[i]))
		}
	}
	return ix
}

func (ix *index[E]) counts() (chains, rules, sets, elems int) {
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
