package reconciler

import (
	"hash/maphash"
	"math/bits"
)

// elemIndex is the desired index's entries by the ID of their element: an open-addressing hash
// table of entry pointers (linear probing), the ID read from the entry itself. A Go map of
// string to *elemEntry keeps the key's 16-byte header beside the 8-byte pointer in every slot,
// in tables that grow by doubling: ~36 bytes an element, 8 MB of a 10k-Service table's 226k
// elements. This table holds 8 bytes a slot at most 80% full: ~3 MB.
//
// Iteration (each) may delete the entry it is given, and replace entries, but must not add one:
// adding may grow the table, as nothing in the reconciler does while it iterates.
type elemIndex struct {
	seed  maphash.Seed
	slots []*elemEntry // nil: never used; tombstone: deleted
	n     int          // entries
	used  int          // entries and tombstones
}

// tombstone marks a deleted slot, so a probe for an ID placed after it goes on.
var tombstone = &elemEntry{}

func newElemIndex() elemIndex { return elemIndex{seed: maphash.MakeSeed()} }

func (ix *elemIndex) len() int { return ix.n }

// slot returns where the probe for an ID of hash h starts: h scaled to the table's size.
func (ix *elemIndex) slot(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(ix.slots)))
	return int(hi)
}

// get returns the entry of id.
func (ix *elemIndex) get(id string) (*elemEntry, bool) {
	if ix.n == 0 {
		return nil, false
	}
	for i := ix.slot(maphash.String(ix.seed, id)); ; i = ix.next(i) {
		switch e := ix.slots[i]; {
		case e == nil:
			return nil, false
		case e != tombstone && e.id() == id:
			return e, true
		}
	}
}

// getBytes is get of the ID in b, without making a string of it.
func (ix *elemIndex) getBytes(b []byte) (*elemEntry, bool) {
	if ix.n == 0 {
		return nil, false
	}
	for i := ix.slot(maphash.Bytes(ix.seed, b)); ; i = ix.next(i) {
		switch e := ix.slots[i]; {
		case e == nil:
			return nil, false
		case e != tombstone && e.id() == string(b):
			return e, true
		}
	}
}

func (ix *elemIndex) next(i int) int {
	if i++; i == len(ix.slots) {
		return 0
	}
	return i
}

// put adds e, or replaces the entry with e's ID by e; it reports whether the ID was new. Only
// adding may grow the table.
func (ix *elemIndex) put(e *elemEntry) bool {
	id := e.id()
	if len(ix.slots) > 0 {
		free := -1
		for i := ix.slot(maphash.String(ix.seed, id)); ; i = ix.next(i) {
			cur := ix.slots[i]
			if cur == nil {
				if free < 0 {
					free = i
				}
				break
			}
			if cur == tombstone {
				if free < 0 {
					free = i
				}
				continue
			}
			if cur.id() == id {
				ix.slots[i] = e
				return false
			}
		}
		if ix.slots[free] == tombstone {
			ix.slots[free] = e
			ix.n++
			return true
		}
		if (ix.used+1)*5 <= len(ix.slots)*4 { // at most 80% full, tombstones included
			ix.slots[free] = e
			ix.n++
			ix.used++
			return true
		}
	}
	ix.resize(max(16, (ix.n+1)*2))
	return ix.put(e)
}

// del removes the entry of id.
func (ix *elemIndex) del(id string) {
	if ix.n == 0 {
		return
	}
	for i := ix.slot(maphash.String(ix.seed, id)); ; i = ix.next(i) {
		switch e := ix.slots[i]; {
		case e == nil:
			return
		case e != tombstone && e.id() == id:
			ix.slots[i] = tombstone
			ix.n--
			return
		}
	}
}

// resize moves the entries to a table of n slots, dropping the tombstones.
func (ix *elemIndex) resize(n int) {
	old := ix.slots
	ix.slots, ix.n, ix.used = make([]*elemEntry, n), 0, 0
	for _, e := range old {
		if e != nil && e != tombstone {
			ix.put(e)
		}
	}
}

// each calls fn for every entry (see elemIndex on what fn may do).
func (ix *elemIndex) each(fn func(e *elemEntry)) {
	for i := 0; i < len(ix.slots); i++ {
		if e := ix.slots[i]; e != nil && e != tombstone {
			fn(e)
		}
	}
}
