package reconciler_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
)

// TestRecreatedSetElementsKnownToNextPartialSync: when a partial Commit recreates a set (its
// definition changed), the elements it sends with the new set are recorded as applied, so a
// later partial Commit that drops one of them deletes it from the kernel, and a full Commit
// finds nothing to repair. If they were not recorded, the drop would send nothing and the
// kernel would keep the element.
func TestRecreatedSetElementsKnownToNextPartialSync(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		r := &recorder{Interface: open()}
		rec := reconciler.New(r, logr.Discard(), time.Now, sharedTable)
		ctx := context.Background()
		commit := func(full bool) reconciler.Result {
			t.Helper()
			res, err := rec.Commit(ctx, full)
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		m := sharedMap()
		m.Comment = "v1"
		rec.Set(sharedTable, reconciler.Owner{}, fragment.Fragment{Sets: []nft.Set{m}})
		rec.Set(sharedTable, ownerA, user(1, pickChain()))
		rec.Set(sharedTable, ownerB, user(2, pickChain()))
		commit(false)

		// Only the set's definition changes: it is deleted and added again with both elements.
		m.Comment = "v2"
		rec.Set(sharedTable, reconciler.Owner{}, fragment.Fragment{Sets: []nft.Set{m}})
		if res := commit(false); res.Full {
			t.Fatal("set recreation commit was full, want partial")
		}
		recreated := false
		for _, op := range r.last.All() {
			if s, ok := op.Object.(*nft.Set); ok && s.Name == "m" && op.Verb == nft.VerbDelete {
				recreated = true
			}
		}
		if !recreated {
			t.Fatal("changing the set's comment did not recreate it; the test no longer covers a recreation")
		}

		// "a" drops its element: the partial Commit must send exactly its delete.
		rec.Set(sharedTable, ownerA, fragment.Fragment{Chains: []fragment.ChainDef{pickChain()}})
		commit(false)
		var dels []string
		for _, op := range r.last.All() {
			if e, ok := elementOf(op.Object); ok && op.Verb == nft.VerbDelete {
				dels = append(dels, e.Key[0].Addr.String())
			}
		}
		if len(dels) != 1 || dels[0] != "198.19.0.1" {
			t.Errorf("element deletes sent = %v, want [198.19.0.1]", dels)
		}
		rs, err := r.Dump(ctx, sharedTable)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range rs.Elements["m"] {
			got = append(got, e.Key[0].Addr.String())
		}
		sort.Strings(got)
		if len(got) != 1 || got[0] != "198.19.0.2" {
			t.Errorf("kernel map m holds %v, want [198.19.0.2]", got)
		}

		// Read back: what the reconciler believed it had applied is what the kernel holds.
		if res := commit(true); res.Repairs != 0 || res.Ops != 0 {
			t.Errorf("full commit after the partial ones: %d repairs, %d ops, want none", res.Repairs, res.Ops)
		}
	})
}
