package ruleset

import (
	"slices"
	"sort"
	"strconv"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// Ruleset assembles the whole desired table: the base fragment plus every Service's fragment,
// elements shared by several Services (a ClusterIP with several ports, an endpoint behind several
// Services) kept once. It is what `nftproxy render` prints and what a full sync converges to.
func (b *Builder) Ruleset(node *model.Node, services []*model.Service) *nft.Ruleset {
	frags := []Fragment{b.Base(node)}
	for _, s := range services {
		frags = append(frags, b.Service(node, s))
	}
	return Merge(b.Table(), frags...)
}

// Merge joins fragments into one Ruleset, keeping the first of several identical elements and
// one copy of a chain several fragments declare (the shared pick chains: every fragment that
// needs one declares it with the same rules).
func Merge(t nft.Table, frags ...Fragment) *nft.Ruleset {
	rs := &nft.Ruleset{Table: t, Elements: map[string][]nft.Element{}}
	seen := map[string]bool{}
	chains := map[string]bool{}
	for _, f := range frags {
		for _, c := range f.Chains {
			if chains[c.Chain.Name] {
				continue
			}
			chains[c.Chain.Name] = true
			rs.Chains = append(rs.Chains, c.Chain)
			rs.Rules = append(rs.Rules, c.Rules...)
		}
		rs.Sets = append(rs.Sets, f.Sets...)
		for _, e := range f.Elements {
			id := ElementID(&e)
			if seen[id] {
				continue
			}
			seen[id] = true
			rs.Elements[e.Set] = append(rs.Elements[e.Set], e)
		}
	}
	sort.SliceStable(rs.Sets, func(i, j int) bool { return rs.Sets[i].Name < rs.Sets[j].Name })
	return rs
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
