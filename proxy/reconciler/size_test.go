package reconciler

import (
	"testing"

	"github.com/nftproxy/nftproxy/nft"
)

// TestPlanSize: the room Commit makes in the transaction (plan.size) is exactly what emit
// appends, for a plan with every kind of operation.
func TestPlanSize(t *testing.T) {
	el := &nft.Element{Set: "s", Key: []nft.Value{nft.Int(1)}}
	for name, p := range map[string]*plan{
		"empty": {},
		"every kind": {addChains: []nft.Chain{{Name: "a"}}, replChains: []nft.Chain{{Name: "b"}, {Name: "c"}},
			flushChains: []string{"d"}, delElems: []*nft.Element{el}, delSets: []string{"s"},
			addSets: []nft.Set{{Name: "s"}}, addElems: []*nft.Element{el, el}, addRules: []nft.Rule{{Chain: "a"}},
			delChains: []string{"e"}},
		"elements only": {addElems: []*nft.Element{el}},
	} {
		t.Run(name, func(t *testing.T) {
			tx := nft.NewTransaction(nft.Table{Family: nft.IPv4, Name: "t"})
			p.emit(tx)
			if got, want := p.size(), tx.Len(); got != want {
				t.Errorf("size() = %d, emit appended %d ops", got, want)
			}
		})
	}
}
