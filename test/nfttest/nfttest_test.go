package nfttest

import (
	"fmt"
	"slices"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
)

// TestSortElementRuns sorts consecutive element ops of one verb on one set and keeps every other
// op, and the runs themselves, in place.
func TestSortElementRuns(t *testing.T) {
	tb := nft.Table{Family: nft.IPv4, Name: "nftproxy"}
	el := func(set string, n uint32) *nft.Element { return &nft.Element{Set: set, Key: []nft.Value{nft.Int(n)}} }
	tx := nft.NewTransaction(tb)
	tx.Delete(el("m", 2))
	tx.Delete(el("m", 1))
	tx.Add(el("m", 9))
	tx.Add(el("m", 3))
	tx.Add(el("n", 5))
	tx.Add(el("n", 4))
	tx.Add(&nft.Chain{Name: "c"})
	tx.Add(el("m", 8))
	tx.Add(el("m", 7))
	var got []string
	for _, op := range SortElementRuns(tx).Ops {
		if e, ok := op.Object.(*nft.Element); ok {
			got = append(got, fmt.Sprintf("%s %s %d", op.Verb, e.Set, e.Key[0].Num))
		} else {
			got = append(got, "chain")
		}
	}
	want := []string{"delete m 1", "delete m 2", "add m 3", "add m 9", "add n 4", "add n 5", "chain", "add m 7", "add m 8"}
	if !slices.Equal(got, want) {
		t.Errorf("SortElementRuns = %q, want %q", got, want)
	}
	if e := tx.Ops[0].Object.(*nft.Element); e.Key[0].Num != 2 {
		t.Error("SortElementRuns changed its input")
	}
}
