package reconciler

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"github.com/nftproxy/nftproxy/nft"
)

// TestPlanSize: the operations a plan counts (plan.size) and the room Commit makes for its Ops
// (plan.ops) are exactly what emit appends, for a plan with every kind of operation.
func TestPlanSize(t *testing.T) {
	el := nft.Pack(&nft.Element{Set: "s", Key: []nft.Value{nft.Int(1)}})
	for name, p := range map[string]*plan{
		"empty": {},
		"every kind": {addChains: []nft.Chain{{Name: "a"}}, replChains: []nft.Chain{{Name: "b"}, {Name: "c"}},
			flushChains: []string{"d"}, delElems: []*nft.Packed{&el}, delSets: []string{"s"},
			addSets: []nft.Set{{Name: "s"}}, addElems: []*nft.Packed{&el, &el}, addRules: []nft.Rule{{Chain: "a"}},
			delChains: []string{"e"}},
		"elements only": {addElems: []*nft.Packed{&el}},
		"deletes only":  {delElems: []*nft.Packed{&el, &el}},
	} {
		t.Run(name, func(t *testing.T) {
			tx := nft.NewTransaction(nft.Table{Family: nft.IPv4, Name: "t"})
			p.emit(tx)
			if got, want := p.size(), tx.Len(); got != want {
				t.Errorf("size() = %d, emit appended %d ops", got, want)
			}
			if got, want := p.ops(), len(tx.Ops); got != want {
				t.Errorf("ops() = %d, emit appended %d Ops", got, want)
			}
		})
	}
}

// TestOrderElements: element ops grouped by set in name order, a hash set's elements in the
// order they came, an interval set's in canonical order.
func TestOrderElements(t *testing.T) {
	el := func(set string, k uint32) *nft.Packed {
		p := nft.Pack(&nft.Element{Set: set, Key: []nft.Value{nft.Int(k)}})
		return &p
	}
	ix := &objects{sets: map[string]*nft.Set{"a": {Name: "a"}, "b": {Name: "b"}, "r": {Name: "r", Interval: true}}}
	in := []*nft.Packed{el("b", 9), el("r", 3), el("a", 5), el("b", 1), el("r", 1), el("gone", 7), el("a", 2), el("r", 2)}
	want := []string{"a 5", "a 2", "b 9", "b 1", "gone 7", "r 1", "r 2", "r 3"}
	var got []string
	for _, e := range orderElements(in, ix) {
		u := e.Unpack()
		got = append(got, fmt.Sprintf("%s %d", u.Set, u.Key[0].Num))
	}
	if !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
}

// TestElemEntrySize: a desired entry stays within the 32-byte size class. There is one per
// element of the table (a few hundred thousand at 10k Services): each field added to it costs
// that many times its size, and past 32 bytes the next class is 48.
func TestElemEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(elemEntry{}); got > 32 {
		t.Errorf("elemEntry is %d bytes, want at most 32", got)
	}
}
