// Package chains rebuilds nftproxy's ruleset in the per-endpoint-chain layout that kube-proxy's
// nftables mode used until 1.35: every endpoint of a Service port gets its own chain (a hairpin
// mark rule and a DNAT rule), and the Service chain picks one of them at random with a goto. It
// exists only so the benchmarks can apply that layout our way (one netlink batch) and show what
// the layout itself costs the kernel; nftproxy never programs it.
//
// Difference from upstream, stated once: upstream's Service chain holds one rule with an
// anonymous numgen verdict map ("numgen random mod N vmap { 0 : goto ep0, ... }"); our nft model
// has no anonymous sets, so the Service chain here holds N rules "numgen random mod N-i 0 goto
// ep-i" (uniform, as in nftproxy's affinity rules). Both give the same chains and the same N goto
// edges per Service port, which is what the kernel validates at commit.
package chains

import (
	"fmt"
	"sort"
	"strings"

	"github.com/nftproxy/nftproxy/nft"
)

// Transform returns a copy of rs with every numgen endpoint map replaced by endpoint chains.
// masq is the masquerade mark bit set by the hairpin rule.
func Transform(rs *nft.Ruleset, masq uint32) *nft.Ruleset {
	maps := map[string]*nft.Set{}
	for i := range rs.Sets {
		if rs.Sets[i].NumgenKey > 0 {
			maps[rs.Sets[i].Name] = &rs.Sets[i]
		}
	}
	out := &nft.Ruleset{Table: rs.Table, Elements: map[string][]nft.Element{}}
	for _, s := range rs.Sets {
		if maps[s.Name] == nil {
			out.Sets = append(out.Sets, s)
			out.Elements[s.Name] = rs.Elements[s.Name]
		}
	}
	byChain := map[string][]nft.Rule{}
	for _, r := range rs.Rules {
		byChain[r.Chain] = append(byChain[r.Chain], r)
	}
	for _, c := range rs.Chains {
		out.Chains = append(out.Chains, c)
		var epChains []nft.Chain
		var epRules []nft.Rule
		for _, r := range byChain[c.Name] {
			ng, proto, ok := numgenDNAT(r)
			if !ok || maps[ng.Map] == nil {
				out.Rules = append(out.Rules, r)
				continue
			}
			els := append([]nft.Element(nil), rs.Elements[ng.Map]...)
			sort.Slice(els, func(i, j int) bool { return els[i].Key[0].Num < els[j].Key[0].Num })
			n := uint32(len(els))
			for i, el := range els {
				name := endpointChain(c.Name, el)
				out.Rules = append(out.Rules, nft.Rule{Chain: c.Name, Comment: r.Comment,
					Exprs: []nft.Expr{nft.NumgenMatch{Modulus: n - uint32(i), Value: 0}, nft.Verdict{Kind: nft.VerdictGoto, Chain: name}}})
				epChains = append(epChains, nft.Chain{Name: name})
				dnat := nft.DNAT{Addr: el.Data[0].Addr}
				if ng.WithPort {
					dnat.Port = uint16(el.Data[1].Num)
				}
				exprs := append([]nft.Expr(nil), proto...)
				epRules = append(epRules,
					nft.Rule{Chain: name, Exprs: []nft.Expr{nft.Cmp{Field: nft.FieldSaddr, Value: nft.Addr(el.Data[0].Addr)}, nft.MarkOr{Bits: masq}}},
					nft.Rule{Chain: name, Exprs: append(exprs, dnat)})
			}
		}
		out.Chains = append(out.Chains, epChains...)
		out.Rules = append(out.Rules, epRules...)
	}
	return out
}

// numgenDNAT finds "[protocol match] dnat to numgen random mod N map @m" in r.
func numgenDNAT(r nft.Rule) (nft.DNATNumgen, []nft.Expr, bool) {
	for i, e := range r.Exprs {
		if ng, ok := e.(nft.DNATNumgen); ok {
			return ng, r.Exprs[:i], true
		}
	}
	return nft.DNATNumgen{}, nil, false
}

// endpointChain names an endpoint's chain after its Service chain, as upstream does
// ("endpoint-HASH-ns/svc/proto/port__addr/port"), within nft's 256-byte name limit.
func endpointChain(svcChain string, el nft.Element) string {
	ep := el.Data[0].Addr.String()
	if len(el.Data) > 1 {
		ep += fmt.Sprintf("/%d", el.Data[1].Num)
	}
	name := "ep-" + strings.TrimPrefix(svcChain, "svc-") + "__" + strings.ReplaceAll(ep, ":", ".")
	if len(name) > 240 {
		name = name[:240]
	}
	return name
}

// Stats counts what a ruleset asks the kernel to hold.
type Stats struct{ Chains, Rules, Sets, Elements int }

// Count returns rs's object counts.
func Count(rs *nft.Ruleset) Stats {
	s := Stats{Chains: len(rs.Chains), Rules: len(rs.Rules), Sets: len(rs.Sets)}
	for _, els := range rs.Elements {
		s.Elements += len(els)
	}
	return s
}

// Full is the transaction that creates rs in an empty namespace.
func Full(rs *nft.Ruleset) *nft.Transaction {
	tx := nft.NewTransaction(rs.Table)
	tx.Add(&nft.TableObj{})
	for i := range rs.Chains {
		tx.Add(&rs.Chains[i])
	}
	for i := range rs.Sets {
		tx.Add(&rs.Sets[i])
	}
	for _, s := range rs.Sets {
		for i := range rs.Elements[s.Name] {
			tx.Add(&rs.Elements[s.Name][i])
		}
	}
	for i := range rs.Rules {
		tx.Add(&rs.Rules[i])
	}
	return tx
}

// Diff is the transaction that turns old into new the way upstream's partial sync does: a chain
// whose rules changed is flushed and rewritten, new chains are added, chains no longer used are
// flushed and deleted (after the rules that jumped to them are gone), and set elements are added
// and deleted one by one. Sets themselves are assumed unchanged in definition.
func Diff(old, new *nft.Ruleset) *nft.Transaction {
	tx := nft.NewTransaction(new.Table)
	oldRules, newRules := rulesByChain(old), rulesByChain(new)
	oldChains := map[string]bool{}
	for _, c := range old.Chains {
		oldChains[c.Name] = true
	}
	newChains := map[string]bool{}
	for i, c := range new.Chains {
		newChains[c.Name] = true
		if !oldChains[c.Name] {
			tx.Add(&new.Chains[i])
		}
	}
	for _, s := range new.Sets {
		if !contains(old.Sets, s.Name) {
			s := s
			tx.Add(&s)
		}
	}
	// Elements first deleted, then added, so a changed value (delete+add) works.
	for _, s := range new.Sets {
		was := elementKeys(old.Elements[s.Name])
		is := elementKeys(new.Elements[s.Name])
		for k, e := range was {
			if _, ok := is[k]; !ok {
				e := e
				tx.Delete(&e)
			}
		}
		for k, e := range is {
			if _, ok := was[k]; !ok {
				e := e
				tx.Add(&e)
			}
		}
	}
	for _, c := range new.Chains {
		nr := newRules[c.Name]
		if oldChains[c.Name] && sameRules(new.Table.Family, oldRules[c.Name], nr) {
			continue
		}
		if oldChains[c.Name] {
			ch := c
			tx.Flush(&ch)
		}
		for i := range nr {
			r := nr[i]
			tx.Add(&r)
		}
	}
	for _, c := range old.Chains {
		if !newChains[c.Name] {
			ch := c
			tx.Flush(&ch)
			tx.Delete(&ch)
		}
	}
	return tx
}

func contains(sets []nft.Set, name string) bool {
	for _, s := range sets {
		if s.Name == name {
			return true
		}
	}
	return false
}

func rulesByChain(rs *nft.Ruleset) map[string][]nft.Rule {
	m := map[string][]nft.Rule{}
	for _, r := range rs.Rules {
		m[r.Chain] = append(m[r.Chain], r)
	}
	return m
}

func sameRules(f nft.Family, a, b []nft.Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if nft.RenderRule(f, a[i]) != nft.RenderRule(f, b[i]) || a[i].Comment != b[i].Comment {
			return false
		}
	}
	return true
}

// elementKeys indexes elements by their rendered key and value.
func elementKeys(els []nft.Element) map[string]nft.Element {
	m := make(map[string]nft.Element, len(els))
	for _, e := range els {
		v := ""
		if e.Verdict != nil {
			v = fmt.Sprint(*e.Verdict)
		}
		m[fmt.Sprint(e.Key, e.KeyEnd, e.Data, v, e.Comment)] = e
	}
	return m
}
