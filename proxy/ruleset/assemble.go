package ruleset

import (
	"sort"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// Ruleset assembles the whole desired table: the base fragment plus every Service's fragment,
// elements shared by several Services (a ClusterIP with several ports, an endpoint behind several
// Services) kept once. It is what `nftproxy render` prints and what a full sync converges to.
func (b *Builder) Ruleset(node *model.Node, services []*model.Service) *nft.Ruleset {
	frags := []fragment.Fragment{b.Base(node)}
	for _, s := range services {
		frags = append(frags, b.Service(node, s))
	}
	return Merge(b.Table(), frags...)
}

// Merge joins fragments into one Ruleset, keeping the first of several identical elements and
// one copy of a chain several fragments declare (the shared pick chains: every fragment that
// needs one declares it with the same rules).
func Merge(t nft.Table, frags ...fragment.Fragment) *nft.Ruleset {
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
			id := fragment.ElementID(&e)
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
