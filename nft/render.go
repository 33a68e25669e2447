package nft

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Render writes rs as `nft -f` input that recreates the table: one `table <family> <name> { ... }`
// block with its sets and maps (sorted by name, elements sorted), then its chains (sorted by name)
// with their rules in order. The text is canonical (see Canonical), so two rulesets holding the
// same objects render to the same text; rule handles are not part of it.
//
// Whatever nft 1.0.6 cannot read back is rendered so that `nft -f` fails loudly instead of
// loading something different: an Unknown expression, an empty rule, a name nft's grammar cannot
// carry (nft refuses quoted names), a string holding a double quote or a line break.
func Render(rs *Ruleset) string {
	if rs == nil {
		return ""
	}
	rs = Canonical(rs)
	var b strings.Builder
	fmt.Fprintf(&b, "table %s %s {\n", rs.Table.Family, renderName(rs.Table.Name))
	first := true
	sep := func() {
		if !first {
			b.WriteString("\n")
		}
		first = false
	}
	for i := range rs.Sets {
		sep()
		renderSet(&b, rs.Table.Family, &rs.Sets[i], rs.Elements[rs.Sets[i].Name])
	}
	byChain := map[string][]Rule{}
	for _, r := range rs.Rules {
		byChain[r.Chain] = append(byChain[r.Chain], r)
	}
	for _, c := range rs.Chains {
		sep()
		renderChain(&b, rs.Table.Family, c, byChain[c.Name])
	}
	b.WriteString("}\n")
	return b.String()
}

// RenderRule writes one rule's statements (and comment) as nft prints them inside a chain of a
// table of family f, e.g. `ip daddr . meta l4proto . th dport vmap @service-ips`.
func RenderRule(f Family, r Rule) string {
	var parts []string
	for _, e := range r.Exprs {
		parts = append(parts, renderExpr(f, e))
	}
	if len(parts) == 0 {
		parts = append(parts, renderLoud("empty-rule", "a rule needs at least one expression"))
	}
	if r.Comment != "" {
		parts = append(parts, "comment "+renderString(r.Comment))
	}
	return strings.Join(parts, " ")
}

// renderNameRE is nft 1.0.6's unquoted identifier: quoted names are refused where a chain, set or
// table name is expected, so anything else cannot be written as nft input.
var renderNameRE = regexp.MustCompile(`^[A-Za-z_.][A-Za-z0-9/\-_.]*$`)

func renderName(name string) string {
	if renderNameRE.MatchString(name) {
		return name
	}
	// nft refuses a quoted name here, so the text fails to load instead of naming something else.
	return strconv.Quote(name)
}

// renderLoud is a token nft's scanner rejects ("%"), carrying why, for things nft cannot express.
func renderLoud(what, why string) string {
	return "%" + what + "% " + renderString(renderSanitize(why))
}

func renderSanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '"' || r == '\n' || r == '\r' || r == 0 {
			return '\''
		}
		return r
	}, s)
}

// renderString quotes s for nft. nft strings have no escapes: a double quote or a line break
// cannot be written, so such a string is followed by a token that makes nft fail.
func renderString(s string) string {
	if strings.ContainsAny(s, "\"\n\r\x00") {
		return `"` + renderSanitize(s) + `" %unrenderable-string%`
	}
	return `"` + s + `"`
}

func renderSet(b *strings.Builder, f Family, s *Set, els []Element) {
	kind := "set"
	if s.IsMap() {
		kind = "map"
	}
	fmt.Fprintf(b, "\t%s %s {\n", kind, renderName(s.Name))
	for _, d := range renderSetDecl(f, s) {
		fmt.Fprintf(b, "\t\t%s\n", d)
	}
	if len(els) > 0 {
		b.WriteString("\t\telements = {\n")
		for i, e := range els {
			b.WriteString("\t\t\t" + renderElement(e))
			if i < len(els)-1 {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString("\t\t}\n")
	}
	b.WriteString("\t}\n")
}

// renderSetDecl lists a set's declaration statements (type, flags, default timeout, comment),
// written one per line inside a table block (Render) or joined with "; " after `add set`
// (RenderTransaction).
func renderSetDecl(f Family, s *Set) []string {
	out := []string{renderSetType(f, s)}
	if s.Size > 0 {
		out = append(out, fmt.Sprintf("size %d", s.Size)) // where nft lists it
	}
	var flags []string
	if s.Dynamic {
		flags = append(flags, "dynamic")
	}
	if s.Interval {
		flags = append(flags, "interval")
	}
	if s.HasTimeout || s.Timeout > 0 {
		flags = append(flags, "timeout")
	}
	if len(flags) > 0 {
		out = append(out, "flags "+strings.Join(flags, ","))
	}
	if s.Timeout > 0 {
		out = append(out, "timeout "+renderDuration(s.Timeout))
	}
	if s.Comment != "" {
		out = append(out, "comment "+renderString(s.Comment))
	}
	return out
}

// renderSetType writes "type a . b : c", or the typeof form nft needs when a field is a bare
// integer (the endpoint maps keyed by numgen).
func renderSetType(f Family, s *Set) string {
	typeofNeeded := false
	for _, t := range append(append([]Type{}, s.Key...), s.Data...) {
		if t == TypeInteger {
			typeofNeeded = true
		}
	}
	join := func(ts []Type, typeOf bool) string {
		var parts []string
		for _, t := range ts {
			if typeOf {
				parts = append(parts, renderTypeofExpr(f, s, t))
			} else {
				parts = append(parts, t.String())
			}
		}
		return strings.Join(parts, " . ")
	}
	word := "type"
	if typeofNeeded {
		word = "typeof"
	}
	out := word + " " + join(s.Key, typeofNeeded)
	if len(s.Data) > 0 {
		out += " : " + join(s.Data, typeofNeeded)
	}
	return out
}

func renderTypeofExpr(f Family, s *Set, t Type) string {
	switch t {
	case TypeIPv4Addr:
		return "ip daddr"
	case TypeIPv6Addr:
		return "ip6 daddr"
	case TypeInetProto:
		return "meta l4proto"
	case TypeInetService:
		return "th dport"
	case TypeMark:
		return "meta mark"
	case TypeVerdict:
		return "verdict"
	case TypeInteger:
		if s.NumgenKey == 0 {
			return renderLoud("integer-key-without-NumgenKey", "nft can only describe an integer key as numgen: set NumgenKey")
		}
		return fmt.Sprintf("numgen random mod %d", s.NumgenKey)
	}
	return renderLoud("bad-type", t.String())
}

func renderElement(e Element) string {
	out := renderKey(e.Key, e.KeyEnd)
	if e.Timeout > 0 {
		out += " timeout " + renderDuration(e.Timeout)
	}
	if e.Comment != "" {
		out += " comment " + renderString(e.Comment)
	}
	switch {
	case e.Verdict != nil:
		out += " : " + renderVerdict(*e.Verdict)
	case len(e.Data) > 0:
		out += " : " + renderKey(e.Data, nil)
	}
	return out
}

// renderKey writes a concatenation; with an interval end, each field whose end differs from its
// start becomes "start-end" (nft's form for pipapo and rbtree ranges alike).
func renderKey(key, end []Value) string {
	parts := make([]string, len(key))
	for i, v := range key {
		parts[i] = renderValue(v)
		if end != nil && i < len(end) && CompareValues(v, end[i]) != 0 {
			parts[i] += "-" + renderValue(end[i])
		}
	}
	if end != nil && len(end) != len(key) {
		parts = append(parts, renderLoud("bad-interval", "key end has a different number of fields than the key"))
	}
	return strings.Join(parts, " . ")
}

func renderValue(v Value) string {
	switch v.Type {
	case TypeIPv4Addr:
		if !v.Addr.Is4() {
			return renderLoud("bad-value", "ipv4_addr holding "+v.Addr.String())
		}
		return v.Addr.String()
	case TypeIPv6Addr:
		if !v.Addr.Is6() || v.Addr.Is4In6() {
			return renderLoud("bad-value", "ipv6_addr holding "+v.Addr.String())
		}
		return v.Addr.String()
	case TypeInetProto:
		return renderProto(v.Num)
	case TypeInetService, TypeInteger:
		return strconv.FormatUint(uint64(v.Num), 10)
	case TypeMark:
		return fmt.Sprintf("0x%08x", v.Num)
	}
	return renderLoud("bad-value", fmt.Sprintf("value of type %s", v.Type))
}

func renderProto(p uint32) string {
	switch p {
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 132:
		return "sctp"
	}
	return strconv.FormatUint(uint64(p), 10)
}

// renderDuration writes d in nft's time syntax ("3h", "1h30m", "2s500ms"), to the millisecond.
func renderDuration(d time.Duration) string {
	ms := d.Milliseconds()
	if ms <= 0 {
		return "0s"
	}
	var b strings.Builder
	for _, u := range []struct {
		n    int64
		name string
	}{{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}, {1, "ms"}} {
		if ms >= u.n {
			fmt.Fprintf(&b, "%d%s", ms/u.n, u.name)
			ms %= u.n
		}
	}
	return b.String()
}

func renderChain(b *strings.Builder, f Family, c Chain, rules []Rule) {
	fmt.Fprintf(b, "\tchain %s {\n", renderName(c.Name))
	if c.Base != nil {
		fmt.Fprintf(b, "\t\t%s\n", renderBaseChain(c.Base))
	}
	for _, r := range rules {
		b.WriteString("\t\t" + RenderRule(f, r) + "\n")
	}
	b.WriteString("\t}\n")
}

// renderBaseChain writes the statement that attaches a base chain to its hook.
func renderBaseChain(bc *BaseChain) string {
	pol := bc.Policy
	if pol == "" {
		pol = PolicyAccept
	}
	return fmt.Sprintf("type %s hook %s priority %d; policy %s;", bc.Type, bc.Hook, bc.Priority, pol)
}
