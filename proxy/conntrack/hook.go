package conntrack

import (
	"context"
	"fmt"

	"github.com/nftproxy/nftproxy/proxy/proxier"
)

// Hook deletes, after every sync, the stale UDP conntrack entries of the Services the sync
// changed (endpoints removed, ranges and all-ports included), so UDP flows move to live
// endpoints. It is a proxier.Hook: it runs only once the new rules are committed, since deleting
// an entry earlier would let the next datagram be DNATed by the old rules.
type Hook struct {
	cleaner *Cleaner
	memory  *memory
}

var _ proxier.Hook = (*Hook)(nil)

// NewHook returns a Hook cleaning through c. Its first call cleans every UDP frontend
// committed (flows left from before a restart).
func NewHook(c *Cleaner) *Hook { return &Hook{cleaner: c, memory: newMemory()} }

// AfterCommit cleans the flows of c.Changed that may be stale; a failure leaves those flows
// until their entries time out, it is not retried.
func (h *Hook) AfterCommit(ctx context.Context, c *proxier.Commit) error {
	changes := h.memory.changes(c.Changed)
	if len(changes) == 0 {
		return nil
	}
	if _, err := h.cleaner.Cleanup(ctx, Targets(c.NodePortAddrs(), changes)); err != nil {
		return fmt.Errorf("stale UDP conntrack cleanup failed (those flows recover when their entries time out): %w", err)
	}
	return nil
}
