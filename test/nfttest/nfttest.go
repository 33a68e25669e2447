// Package nfttest holds what tests of several packages need to read nft transactions: the
// element an op carries, packed or not, and a transaction with its element runs sorted so it
// can be compared with a golden text. No production code uses it.
package nfttest

import (
	"cmp"
	"slices"
	"strings"

	"github.com/nftproxy/nftproxy/nft"
)

// ElementOf returns the element an Op's object is when it is one, *nft.Element or *nft.Packed
// (a packed one unpacked in its own memory).
func ElementOf(o nft.Object) (nft.Element, bool) {
	switch e := o.(type) {
	case *nft.Element:
		return *e, true
	case *nft.Packed:
		return e.Unpack(), true
	}
	return nft.Element{}, false
}

// SortElementRuns returns a copy of tx, one Op per operation (a PackedList's elements one by
// one), in which each run of consecutive element ops with the same verb, table and set is
// sorted by nft.CompareElements; every other op keeps its place. The
// reconciler sends a hash set's elements in map-iteration order (sorting a full sync's elements
// cost more than the rest of its plan) and the kernel does not care about that order, so a test
// comparing a sync's ops with a golden text sorts them first. The order of the runs themselves
// (deletes before adds, rules before elements) is kept: that order matters.
func SortElementRuns(tx *nft.Transaction) *nft.Transaction {
	if tx == nil {
		return nil
	}
	out := &nft.Transaction{Table: tx.Table, Ops: make([]nft.Op, 0, tx.Len())}
	for _, op := range tx.All() {
		out.Ops = append(out.Ops, op)
	}
	elem := func(op nft.Op) *nft.Element {
		if e, ok := ElementOf(op.Object); ok {
			return &e
		}
		return nil
	}
	for i := 0; i < len(out.Ops); {
		e := elem(out.Ops[i])
		j := i + 1
		for e != nil && j < len(out.Ops) {
			f := elem(out.Ops[j])
			if f == nil || f.Set != e.Set || out.Ops[j].Verb != out.Ops[i].Verb || out.Ops[j].Table != out.Ops[i].Table {
				break
			}
			j++
		}
		slices.SortStableFunc(out.Ops[i:j], func(a, b nft.Op) int {
			return cmp.Or(nft.CompareElements(*elem(a), *elem(b)), strings.Compare(render(out.Table, a), render(out.Table, b)))
		})
		i = j
	}
	return out
}

// render is op as nft writes it: the tie-break of elements CompareElements holds equal.
func render(t nft.Table, op nft.Op) string {
	return nft.RenderTransaction(&nft.Transaction{Table: t, Ops: []nft.Op{op}})
}
