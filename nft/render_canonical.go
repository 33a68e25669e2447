package nft

import (
	"cmp"
	"slices"
	"strings"
	"time"
)

// Canonical returns a deep copy of rs in the one form two equal rulesets share, so that they can
// be compared field by field or by their rendered text:
//   - chains sorted by name; rules grouped by chain in that order, keeping their order inside a chain;
//   - sets sorted by name, each set's elements sorted by key (then interval end);
//   - an empty base-chain policy is "accept";
//   - a set with a default timeout has HasTimeout set;
//   - an interval element whose end equals its start has no KeyEnd;
//   - an element timeout equal to its set's default timeout is 0 (the kernel reports the default
//     on every element; the model means "no override");
//   - timeouts are cut to milliseconds (the kernel's resolution).
//
// Rule handles are kept; Render leaves them out.
func Canonical(rs *Ruleset) *Ruleset {
	if rs == nil {
		return nil
	}
	out := &Ruleset{Table: rs.Table, Elements: map[string][]Element{}}
	for _, c := range rs.Chains {
		c2 := c
		if c.Base != nil {
			b := *c.Base
			if b.Policy == "" {
				b.Policy = PolicyAccept
			}
			c2.Base = &b
		}
		out.Chains = append(out.Chains, c2)
	}
	slices.SortStableFunc(out.Chains, func(a, b Chain) int { return cmp.Compare(a.Name, b.Name) })

	sets := map[string]*Set{}
	for _, s := range rs.Sets {
		s2 := s
		s2.Key = slices.Clone(s.Key)
		s2.Data = slices.Clone(s.Data)
		s2.Timeout = s.Timeout.Truncate(time.Millisecond)
		if s2.Timeout > 0 {
			s2.HasTimeout = true
		}
		out.Sets = append(out.Sets, s2)
	}
	slices.SortStableFunc(out.Sets, func(a, b Set) int { return cmp.Compare(a.Name, b.Name) })
	for i := range out.Sets {
		sets[out.Sets[i].Name] = &out.Sets[i]
	}

	for name, els := range rs.Elements {
		var list []Element
		for _, e := range els {
			list = append(list, canonicalElement(sets[name], e))
		}
		if len(list) == 0 {
			continue
		}
		slices.SortStableFunc(list, CompareElements)
		out.Elements[name] = list
	}

	byChain := map[string][]Rule{}
	for _, r := range rs.Rules {
		r2 := r
		r2.Exprs = slices.Clone(r.Exprs)
		byChain[r.Chain] = append(byChain[r.Chain], r2)
	}
	for _, c := range out.Chains {
		out.Rules = append(out.Rules, byChain[c.Name]...)
		delete(byChain, c.Name)
	}
	// Rules of chains the ruleset does not declare are kept (sorted by chain) so nothing vanishes.
	rest := make([]string, 0, len(byChain))
	for name := range byChain {
		rest = append(rest, name)
	}
	slices.Sort(rest)
	for _, name := range rest {
		out.Rules = append(out.Rules, byChain[name]...)
	}
	return out
}

func canonicalElement(s *Set, e Element) Element {
	e2 := e
	e2.Key = slices.Clone(e.Key)
	e2.KeyEnd = slices.Clone(e.KeyEnd)
	e2.Data = slices.Clone(e.Data)
	if e.Verdict != nil {
		v := *e.Verdict
		e2.Verdict = &v
	}
	if e2.KeyEnd != nil && slices.Equal(e2.KeyEnd, e2.Key) {
		e2.KeyEnd = nil
	}
	e2.Timeout = e.Timeout.Truncate(time.Millisecond)
	if s != nil && s.Timeout > 0 && e2.Timeout == s.Timeout.Truncate(time.Millisecond) {
		e2.Timeout = 0
	}
	return e2
}

// CompareValues orders two values: by type, then by address or number.
func CompareValues(a, b Value) int {
	if c := cmp.Compare(a.Type, b.Type); c != 0 {
		return c
	}
	if c := a.Addr.Compare(b.Addr); c != 0 {
		return c
	}
	return cmp.Compare(a.Num, b.Num)
}

// CompareKeys orders two keys (concatenations) field by field; a shorter key sorts first.
func CompareKeys(a, b []Value) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if c := CompareValues(a[i], b[i]); c != 0 {
			return c
		}
	}
	return cmp.Compare(len(a), len(b))
}

// CompareElements orders elements of one set by key, then by interval end (a single key, whose
// end is itself, first).
func CompareElements(a, b Element) int {
	if c := CompareKeys(a.Key, b.Key); c != 0 {
		return c
	}
	ea, eb := a.KeyEnd, b.KeyEnd
	if ea == nil {
		ea = a.Key
	}
	if eb == nil {
		eb = b.Key
	}
	return CompareKeys(ea, eb)
}

// Diff compares two rulesets by their canonical rendered text. It returns "" when they hold the
// same objects, or a line diff ("-" only in a, "+" only in b) for a test failure message. Tests
// of this package and of others use it, so it lives here rather than in a test-support package
// (which nft's own tests could not import).
func Diff(a, b *Ruleset) (diff string) {
	ta, tb := Render(a), Render(b)
	if ta == tb {
		return ""
	}
	return renderLineDiff(ta, tb)
}

// renderLineDiff lists the lines of a that b lacks and the lines of b that a lacks, each in its
// text's order; multiplicity counts (a rule present twice in a and once in b shows once).
func renderLineDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	count := func(lines []string) map[string]int {
		m := map[string]int{}
		for _, l := range lines {
			m[l]++
		}
		return m
	}
	ca, cb := count(la), count(lb)
	var sb strings.Builder
	for _, l := range la {
		if cb[l] > 0 {
			cb[l]--
			continue
		}
		sb.WriteString("- " + strings.TrimSpace(l) + "\n")
	}
	for _, l := range lb {
		if ca[l] > 0 {
			ca[l]--
			continue
		}
		sb.WriteString("+ " + strings.TrimSpace(l) + "\n")
	}
	if sb.Len() == 0 {
		// Same lines in a different order (rules reordered inside a chain).
		return "same lines, different order:\n--- a\n" + a + "\n--- b\n" + b
	}
	return sb.String()
}
