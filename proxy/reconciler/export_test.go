package reconciler

import "github.com/nftproxy/nftproxy/nft"

// OwnerOf exposes ownerOf to the tests, which live in package reconciler_test: they build
// fragments with the ruleset builder, which imports this package.
func (r *Reconciler) OwnerOf(op nft.Op) (Owner, bool) { return r.ownerOf(op) }
