package reconciler_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
)

// TestHeldCost: the reconciler's HeldCost of an owner is the Cost of the fragment it set, and 0
// once removed.
func TestHeldCost(t *testing.T) {
	a4 := nft.Addr(netip.MustParseAddr("198.18.0.1"))
	tb := nft.Table{Family: nft.IPv4, Name: "t"}
	f := fragment.Fragment{
		Chains: []fragment.ChainDef{{Chain: nft.Chain{Name: "c"}, Rules: []nft.Rule{
			{Chain: "c", Exprs: []nft.Expr{nft.Verdict{Kind: nft.VerdictAccept}}}}}},
		Sets:     []nft.Set{{Name: "s", Key: []nft.Type{nft.TypeIPv4Addr}}},
		Elements: []nft.Element{{Set: "s", Key: []nft.Value{a4}}},
	}
	r := reconciler.New(nft.NewFake(), logr.Discard(), time.Now, tb)
	o := reconciler.Owner{Namespace: "ns", Name: "a"}
	r.Set(tb, o, f)
	if got := r.HeldCost(tb, o); got != f.Cost() {
		t.Errorf("HeldCost = %d, want the fragment's Cost %d", got, f.Cost())
	}
	r.Set(tb, o, fragment.Fragment{})
	if got := r.HeldCost(tb, o); got != 0 {
		t.Errorf("HeldCost after removal = %d, want 0", got)
	}
}
