package fragment_test

import (
	"net/netip"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
)

// TestElementID: equal keys (an interval end equal to its start counts as none) give equal IDs,
// any difference of set, value, type of address or end gives another, and a slot's ID is
// compact (every element of the table keeps one): a slot of the endpoints map fits 24 bytes.
func TestElementID(t *testing.T) {
	a4, b4 := nft.Addr(netip.MustParseAddr("198.18.0.1")), nft.Addr(netip.MustParseAddr("198.18.0.2"))
	a6 := nft.Addr(netip.MustParseAddr("fd00::1"))
	slot := func(set string, addr nft.Value, port, i uint32) *nft.Element {
		return &nft.Element{Set: set, Key: []nft.Value{addr, nft.Proto(6), nft.Port(uint16(port)), nft.Int(i)}}
	}
	interval := func(lo, hi uint16) *nft.Element {
		return &nft.Element{Set: "r", Key: []nft.Value{a4, nft.Port(lo)}, KeyEnd: []nft.Value{a4, nft.Port(hi)}}
	}
	same := [][2]*nft.Element{
		{slot("s", a4, 80, 1), slot("s", a4, 80, 1)},
		{interval(80, 80), {Set: "r", Key: []nft.Value{a4, nft.Port(80)}}},
	}
	for _, p := range same {
		if x, y := fragment.ElementID(p[0]), fragment.ElementID(p[1]); x != y {
			t.Errorf("%+v and %+v: IDs %q and %q, want equal", p[0], p[1], x, y)
		}
	}
	differ := [][2]*nft.Element{
		{slot("s", a4, 80, 1), slot("t", a4, 80, 1)},
		{slot("s", a4, 80, 1), slot("s", b4, 80, 1)},
		{slot("s", a4, 80, 1), slot("s", a6, 80, 1)},
		{slot("s", a4, 80, 1), slot("s", a4, 81, 1)},
		{slot("s", a4, 80, 1), slot("s", a4, 80, 2)},
		{slot("s", a4, 80, 1), slot("s", a4, 80, 256)},
		{slot("s", a4, 1, 80), slot("s", a4, 80, 1)},
		{interval(80, 90), interval(80, 91)},
		{interval(80, 90), {Set: "r", Key: []nft.Value{a4, nft.Port(80)}}},
		{{Set: "s", Key: []nft.Value{nft.Int(1), nft.Int(2)}}, {Set: "s", Key: []nft.Value{nft.Int(12)}}},
		{{Set: "s\x00", Key: []nft.Value{nft.Int(1)}}, {Set: "s", Key: []nft.Value{nft.Int(0), nft.Int(1)}}},
	}
	for _, p := range differ {
		if x, y := fragment.ElementID(p[0]), fragment.ElementID(p[1]); x == y {
			t.Errorf("%+v and %+v: the same ID %q, want different", p[0], p[1], x)
		}
	}
	if id := fragment.ElementID(slot("endpoints", a4, 30000, 9)); len(id) > 24 {
		t.Errorf("a slot's ID takes %d bytes (%q), want at most 24", len(id), id)
	}
}

// TestFragmentCost: a fragment costs one per chain, rule and element, and SetCost per named
// set.
func TestFragmentCost(t *testing.T) {
	a4 := nft.Addr(netip.MustParseAddr("198.18.0.1"))
	f := fragment.Fragment{
		Chains: []fragment.ChainDef{{Chain: nft.Chain{Name: "c"}, Rules: []nft.Rule{
			{Chain: "c", Exprs: []nft.Expr{nft.Verdict{Kind: nft.VerdictAccept}}},
			{Chain: "c", Exprs: []nft.Expr{nft.Verdict{Kind: nft.VerdictDrop}}}}}},
		Sets:     []nft.Set{{Name: "s", Key: []nft.Type{nft.TypeIPv4Addr}}},
		Elements: []nft.Element{{Set: "s", Key: []nft.Value{a4}}},
	}
	if got, want := f.Cost(), 1+2+fragment.SetCost+1; got != want {
		t.Fatalf("Cost = %d, want %d", got, want)
	}
}
