package e2e

import (
	"net/netip"
	"sort"
	"strings"

	layout "github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/fixture"
)

// containsKey reports whether the ruleset names the Service in a comment.
func containsKey(ruleset string, s fixture.Service) bool {
	return strings.Contains(ruleset, `"`+s.Key())
}

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// objectsOf is the text of what a `nft list ruleset` listing holds for the Service: the chains,
// maps and sets named after it (own chains of ranges, all-ports and affinity ports, source-range
// and affinity sets), and the elements of the shared endpoint maps under its addresses (the
// slots of its shared-mode ports).
func objectsOf(ruleset string, s fixture.Service) string {
	var out strings.Builder
	in := false
	for _, line := range strings.Split(ruleset, "\n") {
		if !in && strings.HasSuffix(line, "{") && strings.Contains(line, "-"+s.Key()) &&
			(strings.HasPrefix(line, "\tchain ") || strings.HasPrefix(line, "\tmap ") || strings.HasPrefix(line, "\tset ")) {
			in = true
		}
		if in {
			out.WriteString(line + "\n")
			if line == "\t}" {
				in = false
			}
		}
	}
	var addrs []string
	for _, a := range append(append(append([]netip.Addr(nil), s.ClusterIPs...), s.LoadBalancerIPs...), s.ExternalIPs...) {
		addrs = append(addrs, a.String()+" . ")
	}
	var set string
	for _, line := range strings.Split(canonicalListing(ruleset), "\n") {
		if strings.HasPrefix(line, "\tmap ") {
			set = strings.TrimSuffix(strings.TrimPrefix(line, "\tmap "), " {")
		}
		_, rest, ok := strings.Cut(line, "elements = { ")
		if !ok || !(layout.IsEndpointMap(set, layout.MapEndpoints) || layout.IsEndpointMap(set, layout.MapLocalEndpoints)) {
			continue
		}
		for _, e := range splitElements(strings.TrimSuffix(rest, " }")) {
			for _, a := range addrs {
				if strings.HasPrefix(e, a) {
					out.WriteString(set + ": " + e + "\n")
				}
			}
		}
	}
	return out.String()
}

// canonicalListing sorts the elements of every set and map of a `nft list ruleset` listing.
// The kernel lists interval (pipapo) elements in the order they were added, so two identical
// sets filled in different orders list differently; everything else must match as listed.
func canonicalListing(ruleset string) string {
	var out strings.Builder
	lines := strings.Split(ruleset, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		head, rest, ok := strings.Cut(line, "elements = {")
		if !ok {
			out.WriteString(line + "\n")
			continue
		}
		block := rest
		for !strings.HasSuffix(strings.TrimSpace(block), "}") && i+1 < len(lines) {
			i++
			block += "\n" + lines[i]
		}
		block = strings.TrimSuffix(strings.TrimSpace(block), "}")
		elems := splitElements(block)
		sort.Strings(elems)
		out.WriteString(head + "elements = { " + strings.Join(elems, ", ") + " }\n")
	}
	return out.String()
}

// splitElements splits an elements block on the commas that are not inside a quoted comment.
func splitElements(block string) []string {
	var out []string
	var cur strings.Builder
	quoted := false
	flush := func() {
		if e := strings.Join(strings.Fields(cur.String()), " "); e != "" {
			out = append(out, e)
		}
		cur.Reset()
	}
	for _, r := range block {
		switch {
		case r == '"':
			quoted = !quoted
		case r == ',' && !quoted:
			flush()
			continue
		}
		cur.WriteRune(r)
	}
	flush()
	return out
}
