package reconciler

import "github.com/nftproxy/nftproxy/nft"

// OwnerOf names the owner of the object op acts on (see ownersOf), for the tests in package
// reconciler_test, which build fragments with the ruleset builder.
func (r *Reconciler) OwnerOf(op nft.Op) (Owner, bool) {
	owners, owned := r.ownersOf([]nft.Op{op})
	return owners[0], owned[0]
}
