package reconciler

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
// maps. The ruleset builder produces them (data flows builder → reconciler → kernel, so the
// type lives with its consumer); Set records one per owner.
type Fragment struct {
	Chains   []ChainDef
	Sets     []nft.Set
	Elements []nft.Element
}

// ElementID identifies an element within its table: set name, key and interval end (an end
// equal to the key is the same element as no end). Two elements with the same ID cannot both be
// in the kernel; their values may differ. It is a map key, never shown: the identity prefix of
// the element's packing (nft.Packed), ~23 bytes for an endpoint slot. The indexes key their
// entries by the ID their packed element starts with, so an index holds no second copy of it.
func ElementID(e *nft.Element) string {
	var buf [96]byte
	return string(nft.AppendID(buf[:0], e))
}
