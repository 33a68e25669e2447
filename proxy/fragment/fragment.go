// Package fragment holds the contract between the pure ruleset builder and the stateful
// reconciler: the part of the ruleset one owner contributes, and how elements are identified and
// costed. It depends only on nft, so the builder can produce fragments without linking the
// reconciler, and the reconciler can consume them without linking the builder. It stays out of
// nft because owners, recorded affinity data and the cost bound are nftproxy's notions, not the
// kernel's.
package fragment

import (
	"github.com/nftproxy/nftproxy/nft"
)

// ChainDef is a chain with the rules it should hold, in order: how a Fragment declares a chain.
type ChainDef struct {
	Chain nft.Chain
	Rules []nft.Rule
}

// Fragment is the reconciler's input: the part of the ruleset one owner (the base layout, or
// one Service) contributes, its own chains and sets, and its elements, which may live in shared
// maps. The ruleset builder produces them and the reconciler's Set records one per owner (data
// flows builder → reconciler → kernel; the type lives in this leaf so the builder stays pure).
type Fragment struct {
	Chains   []ChainDef
	Sets     []nft.Set
	Elements []nft.Element
	// Recorded is the data the packet path may store into dynamic maps for this owner when
	// rules record it from the packet (an endpoint recorded after DNAT from the connection's
	// reply tuple) rather than as constants of an update: no rule names it, so the fragment
	// does. It counts for the prune of stale entries as a rule's constant data does
	// (proxy/reconciler/affinity.go); it is no kernel object.
	Recorded []Recorded
}

// Recorded is data (an endpoint: address . port) that may be stored into dynamic map Set.
type Recorded struct {
	Set  string
	Data []nft.Value
}

// ElementID identifies an element within its table: set name, key and interval end (an end
// equal to the key is the same element as no end). Two elements with the same ID cannot both be
// in the kernel; their values may differ. It is a map key, never shown: the identity prefix of
// the element's packing (nft.Packed), at most 24 bytes for an endpoint slot (TestElementID).
// The indexes key their entries by the ID their packed element starts with, so an index holds
// no second copy of it.
func ElementID(e *nft.Element) string {
	var buf [96]byte
	return string(nft.AppendID(buf[:0], e))
}

// SetCost is what one named set counts for in Cost. The kernel keeps a table's sets in a list
// that every op naming a set walks, so a set costs far more than an element, and more the more
// sets the table holds; the ratio is measured in bench/README.md, "What one Service costs".
const SetCost = 100

// Cost is what the fragment asks of the kernel to install, in elements' worth: one per chain,
// rule and element, SetCost per named set. Elements dominate the cost of every Service the
// layout shares maps for; the proxier bounds each Service by it.
func (f *Fragment) Cost() int {
	n := len(f.Chains) + len(f.Elements) + SetCost*len(f.Sets)
	for i := range f.Chains {
		n += len(f.Chains[i].Rules)
	}
	return n
}
