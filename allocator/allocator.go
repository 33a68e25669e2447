// Package allocator hands out node ports from a configured range: single ports for ordinary
// NodePort Services, and claims of contiguous blocks for port-range Services (identity-mapped, so
// the caller names the block; README.md says why there is no dynamic block placement). It follows KEP-3668's split of
// the range into a lower band kept for user-chosen (static) ports and an upper band used first for
// ports the allocator picks (dynamic), so a static request rarely collides with an earlier
// dynamic one. State can be snapshotted and restored, because the allocation must always be
// recreatable from what the cluster holds.
//
// The package depends on nothing else in nftproxy; metrics reach it through Observer.
package allocator

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
)

// Rand is the random source for dynamic allocation. *math/rand/v2.Rand satisfies it; tests pass
// a seeded one so picks are reproducible. The allocator calls it only while holding its lock, so
// it need not be safe for concurrent use.
type Rand interface {
	IntN(n int) int
}

// Option configures an Allocator at construction.
type Option func(*Allocator)

// WithRand sets the random source used to pick where a dynamic scan starts. Without it each
// Allocator seeds its own generator.
func WithRand(r Rand) Option { return func(a *Allocator) { a.rand = r } }

// WithObserver sets where counts and allocation events go (normally the metrics package).
func WithObserver(o Observer) Option { return func(a *Allocator) { a.obs = o } }

// Allocator is a bitmap port allocator over one inclusive range. It is safe for concurrent use.
// Every allocation carries an owner string (for example "namespace/name" of the Service) so that
// conflicts can say who holds the port.
type Allocator struct {
	mu     sync.Mutex
	r      Range
	offset int // BandOffset(r.Size()): bits [0, offset) are the static band
	bits   bitmap
	used   int
	ports  map[int]string     // single port -> owner
	blocks map[int]blockClaim // first port of a block -> claim
	rand   Rand
	obs    Observer
}

type blockClaim struct {
	r     Range
	owner string
}

// New returns an empty allocator over r. It fails only if r is not a valid range.
func New(r Range, opts ...Option) (*Allocator, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	a := &Allocator{
		r:      r,
		offset: BandOffset(r.Size()),
		bits:   newBitmap(r.Size()),
		ports:  map[int]string{},
		blocks: map[int]blockClaim{},
		obs:    nopObserver{},
	}
	for _, o := range opts {
		o(a)
	}
	if a.rand == nil {
		a.rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	a.obs.Counts(0, r.Size())
	return a, nil
}

// Range is the range this allocator serves.
func (a *Allocator) Range() Range { return a.r }

// Used is the number of allocated ports, counting every port of every block.
func (a *Allocator) Used() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used
}

// Free is the number of ports still available.
func (a *Allocator) Free() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.r.Size() - a.used
}

// Owner reports who holds port p, and the block it belongs to if any (a single port has
// block.Size() == 0). ok is false for a free or out-of-range port.
func (a *Allocator) Owner(p int) (owner string, block Range, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.r.Contains(p) || !a.bits.get(p-a.r.First) {
		return "", Range{}, false
	}
	owner, b := a.ownerLocked(p)
	if b == nil {
		return owner, Range{}, true
	}
	return owner, *b, true
}

// ownerLocked finds the holder of an allocated port. Blocks are searched linearly: this runs only
// on error and lookup paths, and a cluster has few range Services.
func (a *Allocator) ownerLocked(p int) (string, *Range) {
	if o, ok := a.ports[p]; ok {
		return o, nil
	}
	for _, c := range a.blocks {
		if c.r.Contains(p) {
			r := c.r
			return c.owner, &r
		}
	}
	return "", nil
}

// Allocate picks a free port for owner. It scans the dynamic band from a random point and wraps;
// only when that band is full does it scan the static band the same way.
func (a *Allocator) Allocate(owner string) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p, err := a.allocateLocked(owner)
	a.record(ScopeDynamic, err)
	return p, err
}

func (a *Allocator) allocateLocked(owner string) (int, error) {
	if err := checkOwner(owner); err != nil {
		return 0, err
	}
	size := a.r.Size()
	i := -1
	if a.offset < size {
		i = a.bits.freeFrom(a.offset, size, a.offset+a.rand.IntN(size-a.offset))
	}
	if i < 0 && a.offset > 0 {
		i = a.bits.freeFrom(0, a.offset, a.rand.IntN(a.offset))
	}
	if i < 0 {
		return 0, &FullError{Range: a.r}
	}
	a.bits.set(i)
	a.used++
	p := a.r.First + i
	a.ports[p] = owner
	return p, nil
}

// AllocatePort claims a port the user chose. Any free port of the range may be claimed, in
// either band; the bands only steer Allocate.
func (a *Allocator) AllocatePort(p int, owner string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.claimLocked(Range{First: p, Last: p}, owner, false)
	a.record(ScopeStatic, err)
	return err
}

// claimLocked marks req allocated to owner if it is valid and wholly free.
func (a *Allocator) claimLocked(req Range, owner string, block bool) error {
	if err := checkOwner(owner); err != nil {
		return err
	}
	if req.First < a.r.First || req.Last > a.r.Last {
		return &OutOfRangeError{Request: req, Range: a.r}
	}
	lo, hi := req.First-a.r.First, req.Last-a.r.First+1
	if i := a.bits.firstSet(lo, hi); i >= 0 {
		p := a.r.First + i
		o, b := a.ownerLocked(p)
		return &AllocatedError{Port: p, Owner: o, Block: b}
	}
	a.bits.setRun(lo, hi, true)
	a.used += hi - lo
	if block {
		a.blocks[req.First] = blockClaim{r: req, owner: owner}
	} else {
		a.ports[req.First] = owner
	}
	return nil
}

// Release frees a single port. Releasing a free port, or one port of a block, is an
// ErrNotAllocated error: both mean the caller's view of the state is wrong, which is worth
// hearing about (callers that want idempotence can ignore it with errors.Is).
func (a *Allocator) Release(p int) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.r.Contains(p) {
		return &OutOfRangeError{Request: Range{First: p, Last: p}, Range: a.r}
	}
	if _, ok := a.ports[p]; !ok {
		if o, b := a.ownerLocked(p); b != nil {
			return fmt.Errorf("release port %d: %w: it is part of block %s of %s; release the whole block with ReleaseBlock",
				p, ErrNotAllocated, b, o)
		}
		return fmt.Errorf("release port %d: %w: the port is free", p, ErrNotAllocated)
	}
	delete(a.ports, p)
	a.bits.clear(p - a.r.First)
	a.used--
	a.obs.Counts(a.used, a.r.Size()-a.used)
	return nil
}

// AllocateBlockAt claims the block start..start+width-1. Node-port blocks are identity-mapped
// (a ranged port's block is its own range, allocator/policy), so the caller always knows where
// a block goes and the allocator never picks one: it only checks that the ports are free and
// in range, and records the owner.
func (a *Allocator) AllocateBlockAt(start, width int, owner string) (Range, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := Range{First: start, Last: start + width - 1}
	err := a.checkWidth(width)
	if err == nil {
		err = a.claimLocked(b, owner, true)
	}
	a.record(ScopeStatic, err)
	if err != nil {
		return Range{}, err
	}
	return b, nil
}

// ReleaseBlock frees a block. b must be exactly a block that was allocated (same ends), so a
// stale or mistyped annotation cannot free ports that belong to someone else.
func (a *Allocator) ReleaseBlock(b Range) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if b.First < a.r.First || b.Last > a.r.Last {
		return &OutOfRangeError{Request: b, Range: a.r}
	}
	c, ok := a.blocks[b.First]
	if !ok || c.r != b {
		if ok {
			return fmt.Errorf("release block %s: %w: the block starting there is %s (owner %s); release it with its exact ends",
				b, ErrNotAllocated, c.r, c.owner)
		}
		return fmt.Errorf("release block %s: %w: no block starts at port %d", b, ErrNotAllocated, b.First)
	}
	delete(a.blocks, b.First)
	a.bits.setRun(b.First-a.r.First, b.Last-a.r.First+1, false)
	a.used -= b.Size()
	a.obs.Counts(a.used, a.r.Size()-a.used)
	return nil
}

// Blocks lists the allocated blocks in port order; useful for status output and tests.
func (a *Allocator) Blocks() []Range {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Range, 0, len(a.blocks))
	for _, c := range a.blocks {
		out = append(out, c.r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First < out[j].First })
	return out
}

// record tells the observer how a request went.
func (a *Allocator) record(scope Scope, err error) {
	if err != nil {
		a.obs.AllocationFailed(scope)
		return
	}
	a.obs.Allocated(scope)
	a.obs.Counts(a.used, a.r.Size()-a.used)
}

func (a *Allocator) checkWidth(width int) error {
	if width < 1 || width > a.r.Size() {
		return fmt.Errorf("%w %d: a block must hold between 1 and %d ports (the size of range %s)",
			ErrInvalidWidth, width, a.r.Size(), a.r)
	}
	return nil
}

func checkOwner(owner string) error {
	if owner == "" {
		return fmt.Errorf("%w: owner is empty; pass the claimant's name, e.g. namespace/service", ErrInvalidOwner)
	}
	return nil
}
