package trace

import (
	"fmt"

	"github.com/nftproxy/nftproxy/nft"
)

// Step is one thing the ruleset did to a packet on its way: a base chain entered, or a rule
// that matched and acted (set a mark, NATed, jumped, gave a verdict). Tools that explain a
// trace (nftproxy explain) read the comments and map elements of the steps: the tracer itself
// knows nothing of how nftproxy names its chains.
type Step struct {
	// Chain is the chain the step happened in.
	Chain string
	// Rule is the rule's index in Chain; -1 for entering a base chain (Hook set) or its policy.
	Rule int
	// Hook is the base chain's hook, for Rule -1.
	Hook nft.Hook
	// Comment is the rule's comment.
	Comment string
	// Map and Element are the verdict map and its element a lookup of the rule hit (the
	// element's comment names what it is for); empty otherwise.
	Map     string
	Element *nft.Element
	// Did says what the rule did, in nft's words: "meta mark |= 0x4000", "dnat to
	// 198.18.128.10:8080", "masquerade", "goto pick-3", "reject-tcp-reset", "policy drop".
	Did []string
}

// String is the step in one line: chain, rule, what it did, and its comment or element.
func (s Step) String() string {
	where := s.Chain
	if s.Rule >= 0 {
		where = fmt.Sprintf("%s #%d", s.Chain, s.Rule)
	} else if s.Did == nil {
		return fmt.Sprintf("%s (hook %s)", s.Chain, s.Hook)
	}
	out := fmt.Sprintf("%s: %v", where, s.Did)
	if s.Element != nil {
		out += fmt.Sprintf(" [@%s element %q]", s.Map, s.Element.Comment)
	}
	if s.Comment != "" {
		out += fmt.Sprintf(" (%s)", s.Comment)
	}
	return out
}

// Path follows p once, drawing 0 at every numgen draw (the first endpoint), and returns its
// outcome with every step on the way: which base chains it met, which rules acted, which map
// elements sent it where. Every draw takes the same chains in a ruleset nftproxy writes (the
// draw picks only the endpoint), so one path explains them all; Spread weighs the endpoints.
func (tr *Tracer) Path(p Packet) (out Outcome, steps []Step, err error) {
	defer catch(p, &err)
	st := &state{dyn: tr.cloneDyn(), path: &[]Step{}}
	o := tr.once(p, st)
	return o, *st.path, nil
}

func (st *state) record(s Step) {
	if st.path != nil {
		*st.path = append(*st.path, s)
	}
}

// recordRule records a rule of chain that acted; a verdict map hit brings its element.
func (st *state) recordRule(chain string, i int, comment string, did []string) {
	s := Step{Chain: chain, Rule: i, Comment: comment, Did: did}
	if st.hit != nil {
		s.Map, s.Element = st.hit.Map, st.hit.Element
		st.hit = nil
	}
	st.record(s)
}

// describe says what expression e did (v is what it returned), nothing for a match.
func (st *state) describe(e nft.Expr, v nft.Verdict) []string {
	switch x := e.(type) {
	case nft.MarkOr:
		return []string{fmt.Sprintf("meta mark |= %#x", x.Bits)}
	case nft.MarkXor:
		return []string{fmt.Sprintf("meta mark ^= %#x", x.Bits)}
	case nft.Masquerade:
		return []string{"masquerade"}
	case nft.DNAT, nft.DNATNumgen, nft.DNATMap:
		return []string{"dnat to " + st.dnat[0]}
	case nft.Redirect:
		return []string{"redirect to " + st.dnat[0]}
	case nft.SetUpdate:
		return []string{"update @" + x.Set}
	case nft.Reject:
		return []string{v.Chain}
	case nft.VMap:
		return []string{"vmap @" + x.Map + ": " + verdictText(v)}
	case nft.Verdict:
		return []string{verdictText(v)}
	}
	return nil
}

func verdictText(v nft.Verdict) string {
	switch v.Kind {
	case nft.VerdictAccept:
		return "accept"
	case nft.VerdictDrop:
		return "drop"
	case nft.VerdictReturn:
		return "return"
	case nft.VerdictContinue:
		return "continue"
	case nft.VerdictJump:
		return "jump " + v.Chain
	case nft.VerdictGoto:
		return "goto " + v.Chain
	}
	return fmt.Sprintf("verdict %d", v.Kind)
}
