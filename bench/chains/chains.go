// Package chains rebuilds nftproxy's ruleset in the per-endpoint-chain layout that kube-proxy's
// nftables mode used until 1.35: every endpoint of a Service port gets its own chain (a hairpin
// mark rule and a DNAT rule), the Service port's chain picks one of them at random with a goto,
// and external frontends go through the port's own external chain. It exists only so the
// benchmarks can apply that layout our way (one netlink batch) and show what the layout itself
// costs the kernel; nftproxy never programs it.
//
// nftproxy's own layout keeps the endpoints of single-port Services in shared maps keyed by the
// packet's frontend (slots 0..N-1) and sends every port with N endpoints to one shared chain
// (pick-N, masq-pick-N, local-M-of-N). Transform reads each dispatch element's slots from those
// maps and gives its Service port (named by the element's comment) chains of its own: the
// shared chains become per-port copies whose gotos lead to per-port chains, and a pick becomes
// a Service chain with one endpoint chain per slot. Own chains of ranges and all-ports, a
// cascade of "numgen random mod N-i 0 dnat to" rules, get endpoint chains the same way.
//
// Difference from upstream, stated once: upstream's Service chain holds one rule with an
// anonymous numgen verdict map ("numgen random mod N vmap { 0 : goto ep0, ... }"); our nft model
// has no anonymous sets, so the Service chain here holds N rules "numgen random mod N-i 0 goto
// ep-i" (uniform, as in nftproxy's affinity rules). Both give the same chains and the same N goto
// edges per Service port, which is what the kernel validates at commit.
package chains

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/nftproxy/nftproxy/nft"
)

// sharedChain matches the names of nftproxy's chains shared by every port with the same
// endpoint counts (proxy/ruleset/shared.go).
var sharedChain = regexp.MustCompile(`^((masq-)?pick-(local-)?(nodeport-)?[0-9]+|local-(nodeport-)?[0-9]+-of-[0-9]+)-s[0-9]+$`)

type transform struct {
	rs    *nft.Ruleset
	masq  uint32
	rules map[string][]nft.Rule
	out   *nft.Ruleset
	// built maps a per-port chain's content to its name; taken holds every name in use.
	built map[string]string
	taken map[string]bool
	// rewritten holds the own chains whose gotos to shared chains were resolved.
	rewritten map[string]bool
	// slots indexes each shared endpoint map's elements by their frontend (the key without its
	// slot), built on first use: one pass over a map of every Service's endpoints.
	slots map[string]map[string][]nft.Element
}

// slotsOf returns the elements of endpoint map m grouped by frontend.
func (t *transform) slotsOf(m string) map[string][]nft.Element {
	if idx, ok := t.slots[m]; ok {
		return idx
	}
	idx := map[string][]nft.Element{}
	for _, e := range t.rs.Elements[m] {
		if n := len(e.Key); n > 0 {
			k := frontKey(e.Key[:n-1])
			idx[k] = append(idx[k], e)
		}
	}
	if t.slots == nil {
		t.slots = map[string]map[string][]nft.Element{}
	}
	t.slots[m] = idx
	return idx
}

// frontKey identifies a frontend: its key values without the slot.
func frontKey(vs []nft.Value) string { return fmt.Sprint(vs) }

// Transform returns a copy of rs in the per-endpoint-chain layout. masq is the masquerade mark
// bit set by the hairpin rule.
func Transform(rs *nft.Ruleset, masq uint32) *nft.Ruleset {
	t := &transform{rs: rs, masq: masq, rules: rulesByChain(rs), built: map[string]string{}, taken: map[string]bool{},
		rewritten: map[string]bool{}, out: &nft.Ruleset{Table: rs.Table, Elements: map[string][]nft.Element{}}}
	endpointMaps := map[string]bool{}
	for _, s := range rs.Sets {
		if s.NumgenKey > 0 {
			endpointMaps[s.Name] = true
		}
	}
	for _, c := range rs.Chains {
		t.taken[c.Name] = true
	}
	for _, c := range rs.Chains {
		switch {
		case sharedChain.MatchString(c.Name):
		case cascade(t.rules[c.Name]) != nil:
			t.out.Chains = append(t.out.Chains, c)
			t.serviceChain(c.Name, cascade(t.rules[c.Name]))
		default:
			t.out.Chains = append(t.out.Chains, c)
			t.rewritten[c.Name] = false
		}
	}
	for _, s := range rs.Sets {
		if endpointMaps[s.Name] {
			continue
		}
		t.out.Sets = append(t.out.Sets, s)
		els := make([]nft.Element, 0, len(rs.Elements[s.Name]))
		for _, e := range rs.Elements[s.Name] {
			if e.Verdict != nil && e.Verdict.Chain != "" {
				e.Verdict = t.target(e, *e.Verdict)
			}
			els = append(els, e)
		}
		t.out.Elements[s.Name] = els
	}
	for _, c := range rs.Chains {
		if done, ok := t.rewritten[c.Name]; ok && !done {
			t.out.Rules = append(t.out.Rules, t.rules[c.Name]...)
		}
	}
	return t.out
}

// target is where dispatch element e goes in the per-endpoint-chain layout.
func (t *transform) target(e nft.Element, v nft.Verdict) *nft.Verdict {
	front := e.Key
	switch {
	case sharedChain.MatchString(v.Chain):
		v.Chain = t.resolve(v.Chain, e.Comment, front)
	case !t.rewritten[v.Chain] && t.gotosShared(v.Chain):
		// An own chain (fw-) that goes on to a shared one: resolved with this frontend's slots.
		t.rewritten[v.Chain] = true
		for _, r := range t.rules[v.Chain] {
			t.out.Rules = append(t.out.Rules, t.rewrite(r, v.Chain, e.Comment, front))
		}
	}
	return &v
}

func (t *transform) gotosShared(chain string) bool {
	for _, r := range t.rules[chain] {
		for _, x := range r.Exprs {
			if g, ok := x.(nft.Verdict); ok && sharedChain.MatchString(g.Chain) {
				return true
			}
		}
	}
	return false
}

// resolve builds the per-port chain standing for shared chain for the frontend front of the
// port named comment, and returns its name.
func (t *transform) resolve(chain, comment string, front []nft.Value) string {
	rules := t.rules[chain]
	if len(rules) == 1 {
		if ng, ok := rules[0].Exprs[0].(nft.DNATNumgen); ok && len(rules[0].Exprs) == 1 {
			return t.pick(ng, comment, front)
		}
	}
	var rs []nft.Rule
	for _, r := range rules {
		rs = append(rs, t.rewrite(r, "", comment, front))
	}
	return t.chain("ext-"+comment, rs)
}

// rewrite copies r into chain, its gotos to shared chains resolved for front.
func (t *transform) rewrite(r nft.Rule, chain, comment string, front []nft.Value) nft.Rule {
	ex := append([]nft.Expr(nil), r.Exprs...)
	for i, x := range ex {
		if g, ok := x.(nft.Verdict); ok && sharedChain.MatchString(g.Chain) {
			g.Chain = t.resolve(g.Chain, comment, front)
			ex[i] = g
		}
	}
	r.Chain, r.Exprs = chain, ex
	return r
}

// pick builds the Service chain of the slots of front in ng's map: one endpoint chain each.
func (t *transform) pick(ng nft.DNATNumgen, comment string, front []nft.Value) string {
	els := append([]nft.Element(nil), t.slotsOf(ng.Map)[frontKey(front)]...)
	sort.Slice(els, func(i, j int) bool { return els[i].Key[len(front)].Num < els[j].Key[len(front)].Num })
	var proto []nft.Expr
	for _, v := range front {
		if v.Type == nft.TypeInetProto {
			proto = []nft.Expr{nft.Cmp{Field: nft.FieldL4Proto, Value: v}}
		}
	}
	var eps []endpoint
	for _, e := range els {
		d := nft.DNAT{Addr: e.Data[0].Addr}
		if ng.WithPort {
			d.Port = uint16(e.Data[1].Num)
		}
		eps = append(eps, endpoint{proto: proto, dnat: d})
	}
	prefix := "svc-"
	if strings.Contains(ng.Map, "local") {
		prefix = "local-"
	}
	key := fmt.Sprint(prefix, comment, eps)
	if name, ok := t.built[key]; ok {
		return name
	}
	name := t.name(prefix + comment)
	t.built[key] = name
	t.out.Chains = append(t.out.Chains, nft.Chain{Name: name})
	t.serviceChain(name, eps)
	return name
}

// chain adds a per-port chain holding rules (once per content) and returns its name.
func (t *transform) chain(base string, rules []nft.Rule) string {
	var sb strings.Builder
	sb.WriteString(base)
	for _, r := range rules {
		sb.WriteString("\n" + nft.RenderRule(t.rs.Table.Family, r) + r.Comment)
	}
	if name, ok := t.built[sb.String()]; ok {
		return name
	}
	name := t.name(base)
	t.built[sb.String()] = name
	t.out.Chains = append(t.out.Chains, nft.Chain{Name: name})
	for _, r := range rules {
		r.Chain = name
		t.out.Rules = append(t.out.Rules, r)
	}
	return name
}

// name returns base (cut to nft's limit), or base with a number when it is taken.
func (t *transform) name(base string) string {
	base = strings.Map(func(r rune) rune {
		if r < 0x21 || r > 0x7e || r == '"' {
			return '_'
		}
		return r
	}, base)
	if len(base) > 230 {
		base = base[:230]
	}
	name := base
	for i := 2; t.taken[name]; i++ {
		name = fmt.Sprintf("%s-%d", base, i)
	}
	t.taken[name] = true
	return name
}

// endpoint is one DNAT destination with the protocol match it needs.
type endpoint struct {
	proto []nft.Expr
	dnat  nft.DNAT
}

// cascade returns the endpoints of an own chain that picks with "numgen random mod N-i 0
// [meta l4proto P] dnat to ..." rules (ranges, all-ports), or nil for any other chain.
func cascade(rules []nft.Rule) []endpoint {
	var eps []endpoint
	for _, r := range rules {
		ex := r.Exprs
		if len(ex) > 0 {
			if _, ok := ex[0].(nft.NumgenMatch); ok {
				ex = ex[1:]
			}
		}
		var proto []nft.Expr
		if len(ex) == 2 {
			if c, ok := ex[0].(nft.Cmp); ok && c.Field == nft.FieldL4Proto {
				proto, ex = ex[:1], ex[1:]
			}
		}
		d, ok := nft.DNAT{}, len(ex) == 1
		if ok {
			d, ok = ex[0].(nft.DNAT)
		}
		if !ok {
			return nil
		}
		eps = append(eps, endpoint{proto: proto, dnat: d})
	}
	return eps
}

// serviceChain adds the rules of Service chain name (which exists): a goto cascade to one
// endpoint chain per endpoint, each marking hairpin traffic and DNATing.
func (t *transform) serviceChain(name string, eps []endpoint) {
	n := uint32(len(eps))
	for i, ep := range eps {
		epc := endpointChain(name, ep.dnat)
		t.out.Rules = append(t.out.Rules, nft.Rule{Chain: name,
			Exprs: []nft.Expr{nft.NumgenMatch{Modulus: n - uint32(i), Value: 0}, nft.Verdict{Kind: nft.VerdictGoto, Chain: epc}}})
		t.out.Chains = append(t.out.Chains, nft.Chain{Name: epc})
		t.out.Rules = append(t.out.Rules,
			nft.Rule{Chain: epc, Exprs: []nft.Expr{nft.Cmp{Field: nft.FieldSaddr, Value: nft.Addr(ep.dnat.Addr)}, nft.MarkOr{Bits: t.masq}}},
			nft.Rule{Chain: epc, Exprs: append(append([]nft.Expr(nil), ep.proto...), ep.dnat)})
	}
}

// endpointChain names an endpoint's chain after its Service chain, as upstream does
// ("endpoint-HASH-ns/svc/proto/port__addr/port"), within nft's 256-byte name limit.
func endpointChain(svcChain string, d nft.DNAT) string {
	ep := d.Addr.String()
	if d.Port != 0 {
		ep += fmt.Sprintf("/%d", d.Port)
	}
	name := "ep-" + strings.TrimPrefix(svcChain, "svc-") + "__" + strings.ReplaceAll(ep, ":", ".")
	if len(name) > 240 {
		name = name[:240]
	}
	return name
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
// flushed, then deleted (after the rules that jumped to them are gone), and set elements are added
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
	// Flush every chain no longer used before deleting any: one may jump to another.
	var gone []nft.Chain
	for _, c := range old.Chains {
		if !newChains[c.Name] {
			gone = append(gone, c)
			tx.Flush(&gone[len(gone)-1])
		}
	}
	for i := range gone {
		tx.Delete(&gone[i])
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
