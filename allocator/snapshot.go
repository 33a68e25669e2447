package allocator

import (
	"errors"
	"fmt"
	"sort"
)

// Snapshot is the allocator's state as plain data: who holds which port and which block. It is
// JSON-serializable (ranges print as "first-last") so it can be logged, stored or diffed, but it
// is meant to be rebuilt from the cluster rather than trusted from storage: a controller lists
// Services, turns spec.ports[].nodePort and the nftproxy.io/node-port-ranges annotation into
// claims, and calls Restore.
type Snapshot struct {
	// Range is the allocator's range when the snapshot was taken. Restore does not require it to
	// match: claims are absolute port numbers and are checked against the current range.
	Range  Range        `json:"range"`
	Ports  []PortClaim  `json:"ports,omitempty"`
	Blocks []BlockClaim `json:"blocks,omitempty"`
}

// PortClaim is one single port and its holder.
type PortClaim struct {
	Port  int    `json:"port"`
	Owner string `json:"owner"`
}

// BlockClaim is one contiguous block and its holder.
type BlockClaim struct {
	Block Range  `json:"block"`
	Owner string `json:"owner"`
}

// Snapshot returns the current state, sorted by port, so two snapshots of the same state are
// equal and print the same.
func (a *Allocator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Snapshot{Range: a.r}
	for p, o := range a.ports {
		s.Ports = append(s.Ports, PortClaim{Port: p, Owner: o})
	}
	for _, c := range a.blocks {
		s.Blocks = append(s.Blocks, BlockClaim{Block: c.r, Owner: c.owner})
	}
	sort.Slice(s.Ports, func(i, j int) bool { return s.Ports[i].Port < s.Ports[j].Port })
	sort.Slice(s.Blocks, func(i, j int) bool { return s.Blocks[i].Block.First < s.Blocks[j].Block.First })
	return s
}

// claim is one entry of a snapshot being restored, kept together for conflict messages.
type claim struct {
	r     Range
	owner string
	block bool
}

// Restore replaces the whole state with s. It is all or nothing: if any claim is invalid (empty
// owner, bad width, outside the range) or two claims overlap, the allocator is left unchanged
// and the error lists every problem found; an overlap is a *ConflictError naming both owners.
// Restore does not count as allocation in the metrics; only the counts are updated.
func (a *Allocator) Restore(s Snapshot) error {
	claims := make([]claim, 0, len(s.Ports)+len(s.Blocks))
	for _, p := range s.Ports {
		claims = append(claims, claim{r: Range{First: p.Port, Last: p.Port}, owner: p.Owner})
	}
	for _, b := range s.Blocks {
		claims = append(claims, claim{r: b.Block, owner: b.Owner, block: true})
	}

	a.mu.Lock()
	defer a.mu.Unlock()
	size := a.r.Size()
	holder := make([]int32, size) // 1 + index into claims of the claim holding each offset; 0 free
	var errs []error
	for ci, c := range claims {
		if err := a.checkClaim(c); err != nil {
			errs = append(errs, err)
			continue
		}
		for p := c.r.First; p <= c.r.Last; p++ {
			h := holder[p-a.r.First]
			if h != 0 {
				prev := claims[h-1]
				errs = append(errs, &ConflictError{Port: p, Owner: prev.owner, Other: c.owner,
					Claims: [2]Range{prev.r, c.r}})
				break // one report per colliding claim is enough to act on
			}
			holder[p-a.r.First] = int32(ci + 1)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("restore %d ports and %d blocks: %w", len(s.Ports), len(s.Blocks), errors.Join(errs...))
	}

	bm := newBitmap(size)
	ports := make(map[int]string, len(s.Ports))
	blocks := make(map[int]blockClaim, len(s.Blocks))
	used := 0
	for _, c := range claims {
		bm.setRun(c.r.First-a.r.First, c.r.Last-a.r.First+1, true)
		used += c.r.Size()
		if c.block {
			blocks[c.r.First] = blockClaim{r: c.r, owner: c.owner}
		} else {
			ports[c.r.First] = c.owner
		}
	}
	a.bits, a.ports, a.blocks, a.used = bm, ports, blocks, used
	a.obs.Counts(a.used, size-a.used)
	return nil
}

// checkClaim applies the checks a fresh allocation would, with the claim named in the message.
func (a *Allocator) checkClaim(c claim) error {
	what := describe(c.r)
	if err := checkOwner(c.owner); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if c.r.Last < c.r.First {
		return fmt.Errorf("%s of %s: %w: it ends before it starts", what, c.owner, ErrInvalidWidth)
	}
	if c.r.First < a.r.First || c.r.Last > a.r.Last {
		return fmt.Errorf("%s of %s: %w", what, c.owner, &OutOfRangeError{Request: c.r, Range: a.r})
	}
	return nil
}
