package reconciler

import (
	"hash/maphash"
	"math/bits"
	"unsafe"

	"github.com/nftproxy/nftproxy/nft"
)

// keyed is what an idIndex holds: pointers that know their element's ID (*elemEntry, the
// desired index's entries, and *nft.Packed, an applied index's elements).
type keyed interface {
	comparable
	ID() string
}

// idIndex is a set of pointers by the ID of their element: an open-addressing hash table
// (linear probing), the ID read from the pointer's target. A Go map of string to pointer keeps
// the key's 16-byte header beside the 8-byte pointer in every slot, in tables that grow by
// doubling, and as much again for a restart's read-back. This table holds a pointer and a tag
// byte a slot, at most 80% full (bench/README.md, "Sizes the code's layout rests on").
//
// Each slot has a tag byte beside it: empty, deleted, or 8 bits of its entry's hash. A probe
// reads the dense tags and follows a pointer only when its tag matches, so a lookup does not
// load the entries (and compare their IDs, which share the set's name as a long prefix) of the
// slots it passes, and a miss at 80% full passes many. Without the tags a restart spent a
// visible share of its CPU in these probes (bench/README.md, section B).
//
// Iteration (each) may delete the entry it is given, and replace entries, but must not add one:
// adding may grow the table, as nothing in the reconciler does while it iterates.
type idIndex[T keyed] struct {
	seed  maphash.Seed
	slots []T
	tags  []uint8 // per slot: tagEmpty, tagDeleted, or tagOf the entry's hash
	n     int     // entries
	used  int     // entries and tombstones
}

const (
	tagEmpty   = 0
	tagDeleted = 1 // a probe for an ID placed after it goes on
)

// tagOf is the tag of an entry whose ID hashes to h: its low bits (the slot comes from the high
// ones), never one of the two marks.
func tagOf(h uint64) uint8 {
	if t := uint8(h); t > tagDeleted {
		return t
	}
	return uint8(h>>8) | 2
}

// elemIndex is the desired index's entries by ID.
type elemIndex = idIndex[*elemEntry]

func newElemIndex() elemIndex { return newIDIndex[*elemEntry]() }

// packedIndex is an applied index's elements by ID.
type packedIndex = idIndex[*nft.Packed]

func newPackedIndex() packedIndex { return newIDIndex[*nft.Packed]() }

func newIDIndex[T keyed]() idIndex[T] { return idIndex[T]{seed: maphash.MakeSeed()} }

func (ix *idIndex[T]) len() int { return ix.n }

// slot returns where the probe for an ID of hash h starts: h scaled to the table's size.
func (ix *idIndex[T]) slot(h uint64) int {
	hi, _ := bits.Mul64(h, uint64(len(ix.slots)))
	return int(hi)
}

// get returns the entry of id.
func (ix *idIndex[T]) get(id string) (T, bool) {
	if ix.n == 0 {
		var zero T
		return zero, false
	}
	return ix.at(ix.find(maphash.String(ix.seed, id), id))
}

// getBytes is get of the ID in b, without copying b into a string: the string that looks at b
// is only compared, never kept.
func (ix *idIndex[T]) getBytes(b []byte) (T, bool) {
	if ix.n == 0 {
		var zero T
		return zero, false
	}
	return ix.at(ix.find(maphash.Bytes(ix.seed, b), unsafe.String(unsafe.SliceData(b), len(b))))
}

// find returns the slot holding the entry of id, whose hash is h, or -1.
func (ix *idIndex[T]) find(h uint64, id string) int {
	if ix.n == 0 {
		return -1
	}
	tag := tagOf(h)
	for i := ix.slot(h); ; i = ix.next(i) {
		switch t := ix.tags[i]; {
		case t == tagEmpty:
			return -1
		case t == tag && ix.slots[i].ID() == id:
			return i
		}
	}
}

func (ix *idIndex[T]) at(i int) (T, bool) {
	if i < 0 {
		var zero T
		return zero, false
	}
	return ix.slots[i], true
}

func (ix *idIndex[T]) next(i int) int {
	if i++; i == len(ix.slots) {
		return 0
	}
	return i
}

// put adds e, or replaces the entry with e's ID by e; it reports whether the ID was new. Only
// adding may grow the table.
func (ix *idIndex[T]) put(e T) bool {
	id := e.ID()
	h := maphash.String(ix.seed, id)
	tag := tagOf(h)
	if len(ix.slots) > 0 {
		free := -1
		for i := ix.slot(h); ; i = ix.next(i) {
			t := ix.tags[i]
			if t == tagEmpty {
				if free < 0 {
					free = i
				}
				break
			}
			if t == tagDeleted {
				if free < 0 {
					free = i
				}
				continue
			}
			if t == tag && ix.slots[i].ID() == id {
				ix.slots[i] = e
				return false
			}
		}
		if ix.tags[free] == tagDeleted {
			ix.slots[free], ix.tags[free] = e, tag
			ix.n++
			return true
		}
		if (ix.used+1)*5 <= len(ix.slots)*4 { // at most 80% full, tombstones included
			ix.slots[free], ix.tags[free] = e, tag
			ix.n++
			ix.used++
			return true
		}
	}
	ix.resize(max(16, (ix.n+1)*2))
	return ix.put(e)
}

// del removes the entry of id.
func (ix *idIndex[T]) del(id string) {
	if i := ix.find(maphash.String(ix.seed, id), id); i >= 0 {
		var zero T
		ix.slots[i], ix.tags[i] = zero, tagDeleted
		ix.n--
	}
}

// resize moves the entries to a table of n slots, dropping the tombstones.
func (ix *idIndex[T]) resize(n int) {
	old, oldTags := ix.slots, ix.tags
	ix.slots, ix.tags, ix.n, ix.used = make([]T, n), make([]uint8, n), 0, 0
	for i, e := range old {
		if oldTags[i] > tagDeleted {
			ix.put(e)
		}
	}
}

// each calls fn for every entry (see elemIndex on what fn may do).
func (ix *idIndex[T]) each(fn func(e T)) {
	for i := 0; i < len(ix.slots); i++ {
		if ix.tags[i] > tagDeleted {
			fn(ix.slots[i])
		}
	}
}
