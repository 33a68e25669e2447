package reconciler

import (
	"math/rand/v2"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
)

func testEntry(k, v int) *elemEntry {
	return &elemEntry{el: nft.Pack(&nft.Element{Set: "s", Key: []nft.Value{nft.Int(uint32(k))}, Data: []nft.Value{nft.Int(uint32(v))}})}
}

// TestElemIndexAgainstMap: seeded adds, replacements and deletes over a small key space (so
// probes collide and cross tombstones, and the table grows and shrinks) leave the index holding
// exactly what a Go map given the same steps holds; each visits every entry once and may delete
// the entry it is given.
func TestElemIndexAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ix := newElemIndex()
	want := map[string]*elemEntry{}
	check := func(step int) {
		t.Helper()
		if ix.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, ix.len(), len(want))
		}
		seen := map[string]bool{}
		ix.each(func(e *elemEntry) {
			if seen[e.ID()] {
				t.Fatalf("step %d: each visited %q twice", step, e.ID())
			}
			seen[e.ID()] = true
			if want[e.ID()] != e {
				t.Fatalf("step %d: each gave an entry the map does not hold for %q", step, e.ID())
			}
		})
		if len(seen) != len(want) {
			t.Fatalf("step %d: each visited %d entries, want %d", step, len(seen), len(want))
		}
	}
	for step := 0; step < 20000; step++ {
		k := rng.IntN(300)
		e := testEntry(k, rng.IntN(3))
		id := e.ID()
		switch op := rng.IntN(10); {
		case op < 6:
			_, had := want[id]
			if added := ix.put(e); added == had {
				t.Fatalf("step %d: put(%d) reported new %v, the map had it: %v", step, k, added, had)
			}
			want[id] = e
		case op < 9:
			ix.del(id)
			delete(want, id)
		default: // delete while iterating, as eachInSets' callers do
			ix.each(func(e *elemEntry) {
				if rng.IntN(4) == 0 {
					delete(want, e.ID())
					ix.del(e.ID())
				}
			})
		}
		got, ok := ix.get(id)
		if w, wok := want[id]; ok != wok || got != w {
			t.Fatalf("step %d: get(%d) = %v, %v; want %v, %v", step, k, got, ok, w, wok)
		}
		if got, ok := ix.getBytes([]byte(id)); ok != (want[id] != nil) || (ok && got != want[id]) {
			t.Fatalf("step %d: getBytes(%d) differs from the map", step, k)
		}
		if step%500 == 0 {
			check(step)
		}
	}
	check(-1)
	// Churn over 300 keys never grows the table past twice the most entries it can hold:
	// tombstones are dropped when it grows.
	if len(ix.slots) > 2*(300+1)+16 {
		t.Errorf("%d slots after churn over 300 keys: tombstones were not reclaimed", len(ix.slots))
	}
}

// TestElemIndexSize: a slot is a pointer and a tag byte and the table is at most 80% full, at
// most twice the entries after growing: 226k elements (10k Services) take ~4 MB at most. Among
// 100k entries many share a tag in one probe sequence: each is found as itself.
func TestElemIndexSize(t *testing.T) {
	ix := newElemIndex()
	const n = 100000
	for i := 0; i < n; i++ {
		ix.put(testEntry(i, 0))
	}
	if got := len(ix.slots); got*4 < n*5 || got > 2*(n+1)+16 {
		t.Errorf("%d slots for %d entries, want between 1.25 and 2 per entry", got, n)
	}
	for i := 0; i < n; i++ {
		id := testEntry(i, 0).ID()
		if e, ok := ix.get(id); !ok || e.ID() != id {
			t.Fatalf("entry %d: get found %v, %v", i, e, ok)
		}
	}
}
