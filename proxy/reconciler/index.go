package reconciler

import (
	"reflect"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
)

// elemEntry is one desired element and how many owners want it (a ClusterIP with several
// ports, an endpoint behind several Services). The element is kept packed (nft.Packed: one
// short string instead of an nft.Element and its values), and the index's
// key is its packing's ID prefix, so an entry is 32 bytes and its element one allocation. Who
// wants the element is not kept here (an Owner is 32 bytes) but found in the owners' records, on
// the failure path alone (see ownersOf).
type elemEntry struct {
	// el is never changed in place: the applied index holds it once committed, so the desired
	// and the applied index share one copy of every element they agree on. A new value gets a
	// new entry (replace).
	el nft.Packed
	// refs counts the owners that want the element.
	refs int32
	// applied is set while the applied index linked to this entry's index holds el itself (see
	// appliedIndex): a byte of the entry's padding instead of a second map of every element.
	applied bool
}

// id is the entry's key in its index.
func (e *elemEntry) ID() string { return e.el.ID() }

// replace returns a copy of the entry holding el instead (the old one may be what the kernel
// holds: see table.letGo), not marked applied.
func (e *elemEntry) replace(el nft.Packed) *elemEntry {
	c := *e
	c.el = el
	c.applied = false
	return &c
}

// objects are one table's chains and sets, by name, and which chains name each set.
type objects struct {
	chains map[string]*fragment.ChainDef
	sets   map[string]*nft.Set
	// refs lists, per set, the chains whose rules name it.
	refs map[string]map[string]bool
}

// desiredIndex is one table's objects and elements as the owners want them.
type desiredIndex struct {
	objects
	elems elemIndex // by ElementID
	// perSet counts the elements of each set (a second map of every element's ID cost as much
	// as the index itself: the few lookups by set scan elems, see eachInSets).
	perSet map[string]int
}

func newObjects() objects {
	return objects{chains: map[string]*fragment.ChainDef{}, sets: map[string]*nft.Set{}, refs: map[string]map[string]bool{}}
}

func newDesiredIndex() *desiredIndex {
	return &desiredIndex{objects: newObjects(), elems: newElemIndex(), perSet: map[string]int{}}
}

func (ix *objects) putChain(c *fragment.ChainDef) {
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

// putElem adds the entry of a new ID (Set changes an existing entry itself).
func (ix *desiredIndex) putElem(e *elemEntry) {
	if ix.elems.put(e) {
		ix.perSet[e.el.Set()]++
	}
}

// eachInSets calls fn for every element of the named sets: one scan of the index, and none
// when those sets hold nothing (a new set, or one the packet path fills).
func (ix *desiredIndex) eachInSets(sets map[string]bool, fn func(id string, e *elemEntry)) {
	if !anyCounted(ix.perSet, sets) {
		return
	}
	ix.elems.each(func(e *elemEntry) {
		if sets[e.el.Set()] {
			fn(e.ID(), e)
		}
	})
}

func (ix *desiredIndex) delElem(id string) {
	if cur, ok := ix.elems.get(id); ok {
		countDown(ix.perSet, cur.el.Set())
		ix.elems.del(id)
	}
}

// anyCounted reports whether perSet counts an element in any of sets.
func anyCounted(perSet map[string]int, sets map[string]bool) bool {
	for n := range sets {
		if perSet[n] > 0 {
			return true
		}
	}
	return false
}

func countDown(perSet map[string]int, set string) {
	if perSet[set]--; perSet[set] <= 0 {
		delete(perSet, set)
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
		case nft.DNATMap:
			out = append(out, x.Map)
		case nft.SetUpdate:
			out = append(out, x.Set)
		}
	}
	return out
}

func (ix *desiredIndex) counts() (chains, rules, sets, elems int) {
	for _, c := range ix.chains {
		rules += len(c.Rules)
	}
	return len(ix.chains), rules, len(ix.sets), ix.elems.len()
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

// sameElement compares what two elements of one ID map to: packings are equal exactly when the
// elements are.
func sameElement(a, b *nft.Packed) bool { return a == b || a.String() == b.String() }
