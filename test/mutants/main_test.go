package main

import (
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

const sample = `package p

import "sort"

const width = 8

func build(xs []int, all bool) []int {
	var out []int
	for _, x := range xs {
		if x > 3 && all {
			out = append(out, x+2)
		}
	}
	sort.Ints(out)
	return out
}
`

func TestFindInFile(t *testing.T) {
	ms, err := FindInFile("p", "p.go", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range ms {
		got = append(got, m.Op+" "+m.Was+" -> "+m.With)
	}
	want := []string{ // a block's statements, then what is inside them
		"delete sort.Ints(out) -> if false { sort.Ints(out) }",
		"negate && -> ||",
		"negate > -> <=",
		"constant 3 -> (3+1)",
		"delete out = append(out, x+2) -> if false { out = append(out, x+2) }",
		"constant 2 -> (2+1)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("mutants:\n%s\nwant (the const declaration is not mutated):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Every mutant must still parse; the deletions keep their identifiers used.
	for _, m := range ms {
		if _, err := parser.ParseFile(token.NewFileSet(), "p.go", apply([]byte(sample), m), 0); err != nil {
			t.Errorf("%s: the mutated source does not parse: %v", m, err)
		}
	}
}

func TestSummaryScore(t *testing.T) {
	res := []Result{{Status: Killed}, {Status: Killed}, {Status: Killed}, {Status: Survived}, {Status: NoBuild}, {Status: NotRun}}
	got := Summary(res)
	want := "mutants: 6 found, 3 killed, 1 survived, 1 did not compile, 1 not run; score 75.0%\n"
	if got != want {
		t.Errorf("Summary = %q, want %q", got, want)
	}
}

func TestSurvivorsReadsTheReport(t *testing.T) {
	ms, err := FindInFile("p", "p.go", []byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	report := Report([]Result{{Mutant: ms[0], Status: Survived}, {Mutant: ms[1], Status: Killed}, {Mutant: ms[2], Status: NotRun}})
	if got := Survivors(ms, report); len(got) != 1 || got[0] != ms[0] {
		t.Errorf("Survivors = %v, want only %v", got, ms[0])
	}
}
