package main

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/nftproxy/nftproxy/test/lab"
)

// group is the results of one row that look alike: the same pod, port and source seen, or the
// same failure outcome.
type group struct {
	answer, port, saw string
	count             int
}

func groups(rs []lab.Result) []group {
	byKey := map[group]int{}
	for _, r := range rs {
		g := group{answer: r.Outcome.String(), port: "-", saw: "-"}
		if r.Outcome == lab.Replied {
			g = group{answer: r.Reply.Pod, port: fmt.Sprint(r.Reply.Port), saw: r.Reply.From.Addr().String()}
		}
		byKey[g]++
	}
	out := make([]group, 0, len(byKey))
	for g, n := range byKey {
		g.count = n
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].answer != out[j].answer {
			return out[i].answer < out[j].answer
		}
		return out[i].saw < out[j].saw
	})
	return out
}

// printTable prints one block of rows per probe, under section headings, and returns how many
// probes passed, how many ran, and how many connections they made.
func printTable(w io.Writer, ps []probe, outs []outcome) (passed, total, conns int) {
	header := []string{"FROM", "PROTO", "TO", "SENT", "ANSWERED", "PORT", "POD SAW", "CHECK", "WHY"}
	type line struct {
		section string
		cells   []string
		notes   []string
	}
	var lines []line
	for i, p := range ps {
		if p.section != "" {
			lines = append(lines, line{section: p.section})
		}
		lead := []string{p.from, p.network, p.to.String(), fmt.Sprint(p.n)}
		if p.skip != "" {
			lines = append(lines, line{cells: append(lead, "-", "-", "-", "skip", p.skip)})
			continue
		}
		total++
		conns += p.n
		verdict := "ok"
		if len(outs[i].fails) > 0 {
			verdict = "FAIL"
		} else {
			passed++
		}
		for j, g := range groups(outs[i].results) {
			answer := g.answer
			if p.n > 1 {
				answer = fmt.Sprintf("%s x%d", g.answer, g.count)
			}
			cells := []string{"", "", "", "", answer, g.port, g.saw, "", ""}
			if j == 0 {
				copy(cells, lead)
				cells[7], cells[8] = verdict, p.why
			}
			lines = append(lines, line{cells: cells})
		}
		if n := len(lines) - 1; len(outs[i].fails) > 0 {
			lines[n].notes = outs[i].fails
		}
	}

	widths := make([]int, len(header))
	for _, l := range append([]line{{cells: header}}, lines...) {
		for c, s := range l.cells {
			widths[c] = max(widths[c], len(s))
		}
	}
	row := func(cells []string) {
		var b strings.Builder
		for c, s := range cells {
			if c == len(cells)-1 {
				b.WriteString(s)
				break
			}
			fmt.Fprintf(&b, "%-*s  ", widths[c], s)
		}
		fmt.Fprintln(w, "  "+strings.TrimRight(b.String(), " "))
	}
	row(header)
	for _, l := range lines {
		if l.section != "" {
			fmt.Fprintf(w, "  -- %s\n", l.section)
			continue
		}
		row(l.cells)
		for _, n := range l.notes {
			fmt.Fprintf(w, "     ! %s\n", n)
		}
	}
	return passed, total, conns
}
