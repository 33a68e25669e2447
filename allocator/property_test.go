package allocator

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
)

// model is the obvious, slow reference: a map from port to holder.
type model struct {
	r      Range
	holder map[int]string
	blocks map[int]Range // first port -> block
}

func (m *model) freeIn(lo, hi int) int {
	n := 0
	for p := lo; p <= hi; p++ {
		if _, ok := m.holder[p]; !ok {
			n++
		}
	}
	return n
}

func (m *model) take(r Range, owner string) error {
	for p := r.First; p <= r.Last; p++ {
		if o, ok := m.holder[p]; ok {
			return fmt.Errorf("allocator gave %v to %s but model has port %d held by %s (double allocation)", r, owner, p, o)
		}
	}
	for p := r.First; p <= r.Last; p++ {
		m.holder[p] = owner
	}
	return nil
}

// TestRandomOperations runs a fixed-seed random mix of every operation against several ranges and
// checks the allocator against the model after each step: no port is handed out twice, blocks
// never overlap anything, dynamic requests respect the band order, counts agree, and a snapshot
// restores to the same state.
func TestRandomOperations(t *testing.T) {
	tests := []struct {
		name  string
		r     string
		seed  uint64
		steps int
	}{
		{name: "KEP small range", r: "32567-32767", seed: 1, steps: 3000},
		{name: "no bands", r: "30000-30012", seed: 2, steps: 1000},
		{name: "just above the band threshold", r: "30000-30016", seed: 3, steps: 1000},
		{name: "default range", r: defaultRange, seed: 4, steps: 1500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(tt.seed, 0))
			a := newTestAllocator(t, tt.r, tt.seed+100)
			r := a.Range()
			dyn := r.DynamicBand()
			m := &model{r: r, holder: map[int]string{}, blocks: map[int]Range{}}
			var singles []int
			maxW := max(1, r.Size()/8)
			for step := range tt.steps {
				owner := fmt.Sprintf("ns/s%d", step)
				switch op := rng.IntN(10); {
				case op < 3: // dynamic single
					dynFree := m.freeIn(dyn.First, dyn.Last)
					p, err := a.Allocate(owner)
					if err != nil {
						if !errors.Is(err, ErrFull) || len(m.holder) != r.Size() {
							t.Fatalf("step %d: Allocate error %v with %d/%d held; want success", step, err, len(m.holder), r.Size())
						}
						continue
					}
					if dynFree > 0 && !dyn.Contains(p) {
						t.Fatalf("step %d: Allocate = %d outside dynamic band %s with %d free there", step, p, dyn, dynFree)
					}
					if err := m.take(Range{p, p}, owner); err != nil {
						t.Fatalf("step %d: %v", step, err)
					}
					singles = append(singles, p)
				case op < 5: // static single
					p := r.First + rng.IntN(r.Size())
					err := a.AllocatePort(p, owner)
					_, held := m.holder[p]
					if held != (err != nil) {
						t.Fatalf("step %d: AllocatePort(%d) error %v; model says held=%v", step, p, err, held)
					}
					if err == nil {
						_ = m.take(Range{p, p}, owner)
						singles = append(singles, p)
					} else if !errors.Is(err, ErrAllocated) {
						t.Fatalf("step %d: AllocatePort(%d) error %v; want ErrAllocated", step, p, err)
					}
				case op < 7: // block (always placed by the caller: identity-mapped)
					w := 1 + rng.IntN(maxW)
					start := r.First + rng.IntN(r.Size()-w+1)
					b, err := a.AllocateBlockAt(start, w, owner)
					want := Range{start, start + w - 1}
					free := m.freeIn(want.First, want.Last) == w
					if free != (err == nil) {
						t.Fatalf("step %d: AllocateBlockAt(%d, %d) = %v, %v; model says free=%v", step, start, w, b, err, free)
					}
					if err == nil {
						_ = m.take(want, owner)
						m.blocks[want.First] = want
					}
				case op < 9: // release a single
					if len(singles) == 0 {
						continue
					}
					i := rng.IntN(len(singles))
					p := singles[i]
					singles = append(singles[:i], singles[i+1:]...)
					if err := a.Release(p); err != nil {
						t.Fatalf("step %d: Release(%d): %v", step, p, err)
					}
					delete(m.holder, p)
				default: // release a block
					for first, b := range m.blocks {
						if err := a.ReleaseBlock(b); err != nil {
							t.Fatalf("step %d: ReleaseBlock(%v): %v", step, b, err)
						}
						for p := b.First; p <= b.Last; p++ {
							delete(m.holder, p)
						}
						delete(m.blocks, first)
						break
					}
				}
				checkAgainstModel(t, step, a, m)
				if step%250 == 0 {
					checkRestore(t, step, a)
				}
			}
		})
	}
}

func checkAgainstModel(t *testing.T, step int, a *Allocator, m *model) {
	t.Helper()
	if a.Used() != len(m.holder) {
		t.Fatalf("step %d: Used() = %d; model holds %d", step, a.Used(), len(m.holder))
	}
	for p := m.r.First; p <= m.r.Last; p++ {
		got, _, ok := a.Owner(p)
		want, wantOK := m.holder[p]
		if ok != wantOK || got != want {
			t.Fatalf("step %d: Owner(%d) = %q, %v; model says %q, %v", step, p, got, ok, want, wantOK)
		}
	}
	if got := len(a.Blocks()); got != len(m.blocks) {
		t.Fatalf("step %d: %d blocks; model has %d", step, got, len(m.blocks))
	}
}

func checkRestore(t *testing.T, step int, a *Allocator) {
	t.Helper()
	snap := a.Snapshot()
	b, err := New(a.Range())
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(snap); err != nil {
		t.Fatalf("step %d: Restore of a live snapshot: %v", step, err)
	}
	if got := b.Snapshot(); !reflect.DeepEqual(got, snap) {
		t.Fatalf("step %d: restored snapshot = %+v; want %+v", step, got, snap)
	}
	if b.Used() != a.Used() {
		t.Fatalf("step %d: restored Used() = %d; want %d", step, b.Used(), a.Used())
	}
}

// TestExactlySizeAllocations: a range of n ports accepts exactly n allocations, dynamic or mixed
// with blocks, and then says it is full.
func TestExactlySizeAllocations(t *testing.T) {
	for _, r := range []string{"30000-30000", "30000-30014", "30000-30015", "30000-30016", "32567-32767", defaultRange} {
		for _, seed := range []uint64{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/seed%d", r, seed), func(t *testing.T) {
				a := newTestAllocator(t, r, seed)
				size := a.Range().Size()
				seen := make(map[int]bool, size)
				for i := 0; i < size; i++ {
					p, err := a.Allocate("ns/x")
					if err != nil {
						t.Fatalf("Allocate #%d of %d: %v; want success", i, size, err)
					}
					if seen[p] || !a.Range().Contains(p) {
						t.Fatalf("Allocate #%d = %d (seen before: %v, in range: %v)", i, p, seen[p], a.Range().Contains(p))
					}
					seen[p] = true
				}
				if p, err := a.Allocate("ns/x"); !errors.Is(err, ErrFull) {
					t.Errorf("Allocate after %d = %d, %v; want ErrFull", size, p, err)
				}
			})
		}
	}
}

// TestConcurrentUse hammers one allocator from many goroutines; -race checks the locking, and the
// final tally checks that no port was given to two holders at once.
func TestConcurrentUse(t *testing.T) {
	const workers, rounds = 8, 200
	a := newTestAllocator(t, defaultRange, 5)
	var mu sync.Mutex
	held := map[int]string{}
	claim := func(p int, owner string) error {
		mu.Lock()
		defer mu.Unlock()
		if o, ok := held[p]; ok {
			return fmt.Errorf("port %d given to %s while %s holds it", p, owner, o)
		}
		held[p] = owner
		return nil
	}
	unclaim := func(p int) {
		mu.Lock()
		defer mu.Unlock()
		delete(held, p)
	}
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("ns/w%d", w)
			var mine []int
			var blocks []Range
			for i := range rounds {
				switch i % 4 {
				case 0, 1:
					p, err := a.Allocate(owner)
					if err != nil {
						errs <- err
						return
					}
					if err := claim(p, owner); err != nil {
						errs <- err
						return
					}
					mine = append(mine, p)
				case 2:
					// Every worker asks for the same blocks, so each is contested: one wins.
					b, err := a.AllocateBlockAt(a.Range().First+5*(i/4), 5, owner)
					if errors.Is(err, ErrAllocated) {
						continue
					}
					if err != nil {
						errs <- err
						return
					}
					for p := b.First; p <= b.Last; p++ {
						if err := claim(p, owner); err != nil {
							errs <- err
							return
						}
					}
					blocks = append(blocks, b)
				case 3:
					p := mine[0]
					mine = mine[1:]
					unclaim(p)
					if err := a.Release(p); err != nil {
						errs <- err
						return
					}
					_ = a.Snapshot()
				}
			}
			for _, b := range blocks[:len(blocks)/2] {
				for p := b.First; p <= b.Last; p++ {
					unclaim(p)
				}
				if err := a.ReleaseBlock(b); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if a.Used() != len(held) {
		t.Errorf("Used() = %d; want %d ports still held by workers", a.Used(), len(held))
	}
}
