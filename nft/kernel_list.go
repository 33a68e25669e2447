package nft

import (
	"context"
	"fmt"
)

// ListSets returns the named sets and maps of table t without their elements: what a caller
// needs to recognise a table (whose it is) without paying for a full Dump.
func (k *Kernel) ListSets(ctx context.Context, t Table) ([]Set, error) {
	sets, err := k.dumpSets(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("list the sets of %s: %w", t, err)
	}
	return sets, nil
}
