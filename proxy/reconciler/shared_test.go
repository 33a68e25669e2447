package reconciler_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
)

// Raw fragments, independent of the layout: a map "m" and a chain "pick" that binds it, declared
// by several owners as the layout's shared pick chains are.

var sharedTable = nft.Table{Family: nft.IPv4, Name: "nftproxy-shared-test"}

func sharedMap() nft.Set {
	return nft.Set{Name: "m", Key: []nft.Type{nft.TypeIPv4Addr}, Data: []nft.Type{nft.TypeIPv4Addr}}
}

// ownerA and ownerB are the two Services of the shared-chain tests.
var ownerA, ownerB = reconciler.Owner{Namespace: "ns", Name: "a"}, reconciler.Owner{Namespace: "ns", Name: "b"}

func pickChain() fragment.ChainDef {
	return fragment.ChainDef{Chain: nft.Chain{Name: "pick"}, Rules: []nft.Rule{{Chain: "pick", Exprs: []nft.Expr{
		nft.CmpSet{Fields: []nft.Field{nft.FieldDaddr}, Set: "m"}, nft.Verdict{Kind: nft.VerdictAccept}}}}}
}

func user(i int, chains ...fragment.ChainDef) fragment.Fragment {
	a := netip.AddrFrom4([4]byte{198, 19, 0, byte(i)})
	return fragment.Fragment{Chains: chains, Elements: []nft.Element{{Set: "m", Key: []nft.Value{nft.Addr(a)}, Data: []nft.Value{nft.Addr(a)}}}}
}

// recorder keeps the last transaction it applied.
type recorder struct {
	nft.Interface
	last *nft.Transaction
}

func (r *recorder) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	r.last = tx
	return r.Interface.Apply(ctx, tx)
}

func TestSharedChainStaysWhileAnyOwnerDeclaresIt(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		k := open()
		clk := &clock{t: time.Unix(1_800_000_000, 0)}
		rec := reconciler.New(k, logr.Discard(), clk.now, sharedTable)
		ctx := context.Background()
		commit := func() reconciler.Result {
			t.Helper()
			res, err := rec.Commit(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		has := func() bool {
			t.Helper()
			rs, err := k.Dump(ctx, sharedTable)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range rs.Chains {
				if c.Name == "pick" {
					return len(rs.Rules) > 0
				}
			}
			return false
		}
		rec.Set(sharedTable, reconciler.Owner{}, fragment.Fragment{Sets: []nft.Set{sharedMap()}})
		// "a" declares the chain twice (two ports with the same endpoint count): counted once.
		rec.Set(sharedTable, ownerA, user(1, pickChain(), pickChain()))
		rec.Set(sharedTable, ownerB, user(2, pickChain()))
		commit()
		if !has() {
			t.Fatal("shared chain missing after the first commit")
		}
		rec.Set(sharedTable, ownerA, fragment.Fragment{})
		commit()
		clk.advance(2 * reconciler.StaleChainDelay)
		commit()
		if !has() {
			t.Fatal("shared chain removed with its first owner although another owner still declares it")
		}
		if owner, _ := rec.OwnerOf(nft.Op{Table: sharedTable, Verb: nft.VerbAdd, Object: &nft.Chain{Name: "pick"}}); owner != ownerB {
			t.Errorf("owner of the shared chain after its first owner left = %q, want ns/b", owner)
		}
		rec.Set(sharedTable, ownerB, user(2))
		commit()
		clk.advance(2 * reconciler.StaleChainDelay)
		commit()
		if has() {
			t.Fatal("shared chain still present after its last owner dropped it")
		}
	})
}

// TestNewChainRulesBeforeElements: a new chain binding a map is sent before the map's new
// elements, so the kernel's bind-time walk of the map's elements finds only the old ones.
func TestNewChainRulesBeforeElements(t *testing.T) {
	r := &recorder{Interface: nft.NewFake()}
	rec := reconciler.New(r, logr.Discard(), time.Now, sharedTable)
	rec.Set(sharedTable, reconciler.Owner{}, fragment.Fragment{Sets: []nft.Set{sharedMap()}})
	rec.Set(sharedTable, ownerA, user(1, pickChain()))
	if _, err := rec.Commit(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	firstElem, lastRule := -1, -1
	for i, op := range r.last.All() {
		switch op.Object.(type) {
		case *nft.Element, *nft.Packed:
			if firstElem < 0 {
				firstElem = i
			}
		case *nft.Rule:
			lastRule = i
		}
	}
	if firstElem < 0 || lastRule < 0 || lastRule > firstElem {
		t.Errorf("rule op at %d, first element op at %d: want every rule before the elements", lastRule, firstElem)
	}
}

// TestNewSetElementsAddedOnce: the elements of a set created in the same transaction are sent
// once (they were sent twice, doubling a full sync's element ops; the kernel took the second
// add of an element silently).
func TestNewSetElementsAddedOnce(t *testing.T) {
	r := &recorder{Interface: nft.NewFake()}
	h := newHarness(t, r)
	h.put(svc(1, 3), svc(2, 2))
	h.commit(false)
	seen := map[string]bool{}
	for _, op := range r.last.All() {
		if e, ok := elementOf(op.Object); ok {
			id := op.Table.String() + " " + fragment.ElementID(e)
			if seen[id] {
				t.Errorf("element %s %+v added twice in one transaction", op.Table, *e)
			}
			seen[id] = true
		}
	}
}
