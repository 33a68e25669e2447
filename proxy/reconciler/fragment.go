package reconciler

import (
	"encoding/binary"
	"slices"

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
// in the kernel; their values may differ. It is a map key, never shown: a compact binary form
// (the set's name, a NUL, then each value self-delimited by a tag), as every element of the
// table keeps one: ~22 bytes for a slot where the text form took ~37. It is on the hot path of
// every sync (one call per element of every changed fragment, and per element read back): one
// allocation for the result, no fmt.
func ElementID(e *nft.Element) string {
	var buf [96]byte
	b := append(append(buf[:0], e.Set...), 0)
	b = appendValues(b, e.Key)
	if e.KeyEnd != nil && !slices.Equal(e.Key, e.KeyEnd) {
		b = appendValues(append(b, idTagEnd), e.KeyEnd)
	}
	return string(b)
}

// The tags that start each value of an ElementID (and its interval end): none is a valid
// start of another, so the encoding is prefix-free and two IDs are equal only for equal keys.
const (
	idTagInvalid = 0
	idTagIPv4    = 4 // then 4 bytes
	idTagIPv6    = 6 // then 16 bytes
	idTagNum     = 'n'
	idTagEnd     = 'e'
)

func appendValues(b []byte, vs []nft.Value) []byte {
	for _, v := range vs {
		switch {
		case v.Type != nft.TypeIPv4Addr && v.Type != nft.TypeIPv6Addr:
			b = binary.AppendUvarint(append(b, idTagNum), uint64(v.Num))
		case !v.Addr.IsValid():
			b = append(b, idTagInvalid)
		case v.Addr.Is4():
			a := v.Addr.As4()
			b = append(append(b, idTagIPv4), a[:]...)
		default:
			a := v.Addr.As16()
			b = append(append(b, idTagIPv6), a[:]...)
		}
	}
	return b
}
