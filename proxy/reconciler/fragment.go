package reconciler

import (
	"slices"
	"strconv"

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
// in the kernel; their values may differ. It is on the hot path of every sync (one call per
// element of every changed fragment, and per element read back): one allocation, no fmt.
func ElementID(e *nft.Element) string {
	b := make([]byte, 0, len(e.Set)+24*(len(e.Key)+len(e.KeyEnd)))
	b = append(append(b, e.Set...), ' ')
	b = appendValues(b, e.Key)
	if e.KeyEnd != nil && !slices.Equal(e.Key, e.KeyEnd) {
		b = appendValues(append(b, '-'), e.KeyEnd)
	}
	return string(b)
}

func appendValues(b []byte, vs []nft.Value) []byte {
	for i, v := range vs {
		if i > 0 {
			b = append(b, " . "...)
		}
		switch v.Type {
		case nft.TypeIPv4Addr, nft.TypeIPv6Addr:
			b = v.Addr.AppendTo(b)
		default:
			b = strconv.AppendUint(b, uint64(v.Num), 10)
		}
	}
	return b
}
