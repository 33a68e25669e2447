// Command mutants is a small mutation tester: it changes one thing in a package's source
// (negates a condition, deletes a statement, changes a constant), runs that package's tests
// against the changed copy, and reports the mutants the tests did not notice ("survivors").
// A survivor that removes a user-visible behaviour is a missing test.
//
// It is ours rather than go-gremlins (whose operators change operators and constants but never
// delete a statement, the mutant that matters most for a builder whose output is a list of
// appended rules) or go-mutesting (not served by the Go module proxy). The source tree is never
// written: each mutant reaches the compiler through `go test -overlay`, so runs can go in
// parallel beside other work in the same checkout.
//
// Usage: go run ./test/mutants -out bin/mutants.txt -for 20m ./proxy/ruleset ./nft
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

func main() {
	out := flag.String("out", "bin/mutants.txt", "report file (score and survivors)")
	budget := flag.Duration("for", 30*time.Minute, "stop starting mutants after this long; the rest are reported as not run")
	perMutant := flag.Duration("timeout", 2*time.Minute, "a mutant whose tests run longer than this counts as killed (a hang is noticed)")
	workers := flag.Int("workers", 1, "mutants tested at once")
	run := flag.String("run", "", "passed to go test -run (empty: every test of the package)")
	retest := flag.String("retest", "", "a previous report: test only the mutants it lists as survived (after adding tests)")
	kernel := flag.Bool("kernel", false, "also run the kernel tier's tests of each package against every mutant (needs root; without it NFTPROXY_UNIT_ONLY=1 skips them)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "mutants: name at least one package directory, e.g. ./proxy/ruleset")
		os.Exit(2)
	}
	var all []Mutant
	for _, dir := range flag.Args() {
		ms, err := Find(dir)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mutants: %s: %v\n", dir, err)
			os.Exit(2)
		}
		all = append(all, ms...)
	}
	ByKind(all)
	if *retest != "" {
		text, err := os.ReadFile(*retest)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutants: -retest:", err)
			os.Exit(2)
		}
		all = Survivors(all, string(text))
	}
	tmp, err := os.MkdirTemp("", "mutants-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(2)
	}
	defer os.RemoveAll(tmp)
	res := testAll(all, tmp, *budget, *perMutant, *workers, *run, *kernel)
	report := Report(res)
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err == nil {
		err = os.WriteFile(*out, []byte(report), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants: writing the report:", err)
		os.Exit(2)
	}
	fmt.Print(Summary(res))
	fmt.Printf("report: %s\n", *out)
}

// Mutant is one change to one file: bytes [Start, End) replaced by With.
type Mutant struct {
	Dir, File  string // package directory, file path
	Line       int
	Op         string // negate, delete, constant, bool
	Start, End int
	With       string
	Was        string
}

func (m Mutant) String() string {
	if m.Op == "delete" {
		return fmt.Sprintf("%s:%d delete: %q", m.File, m.Line, oneLine(m.Was))
	}
	return fmt.Sprintf("%s:%d %s: %q -> %q", m.File, m.Line, m.Op, m.Was, m.With)
}

// Status of a tested mutant.
type Status string

const (
	Killed   Status = "killed"   // a test failed (or timed out)
	Survived Status = "survived" // every test passed
	NoBuild  Status = "no-build" // the mutant does not compile: not counted
	NotRun   Status = "not-run"  // out of time
)

type Result struct {
	Mutant
	Status Status
	By     string // the first failing test, for killed mutants
}

var negations = map[token.Token]token.Token{
	token.EQL: token.NEQ, token.NEQ: token.EQL,
	token.LSS: token.GEQ, token.GEQ: token.LSS,
	token.GTR: token.LEQ, token.LEQ: token.GTR,
	token.LAND: token.LOR, token.LOR: token.LAND,
}

// Find lists the mutants of the non-test Go files of dir.
func Find(dir string) ([]Mutant, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	var ms []Mutant
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		got, err := FindInFile(dir, f, src)
		if err != nil {
			return nil, err
		}
		ms = append(ms, got...)
	}
	return ms, nil
}

// ByKind orders mutants statement deletions first (they are the likeliest to remove a
// behaviour), then negations, booleans and constants, so that a run cut short by -for has
// tried the deletions of every package named.
func ByKind(ms []Mutant) {
	rank := map[string]int{"delete": 0, "negate": 1, "bool": 2, "constant": 3}
	sort.SliceStable(ms, func(i, j int) bool { return rank[ms[i].Op] < rank[ms[j].Op] })
}

// FindInFile lists the mutants of one file's source.
func FindInFile(dir, name string, src []byte) ([]Mutant, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	tf := fset.File(f.Pos())
	off := func(p token.Pos) int { return tf.Offset(p) }
	var ms []Mutant
	add := func(op string, from, to token.Pos, with string) {
		s, e := off(from), off(to)
		ms = append(ms, Mutant{Dir: dir, File: name, Line: tf.Line(from), Op: op, Start: s, End: e, With: with, Was: string(src[s:e])})
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GenDecl:
			// Constants and variables at package level are names, not behaviour: changing
			// one tends to change every use alike.
			return n.Tok != token.CONST
		case *ast.BlockStmt:
			for _, s := range n.List {
				if deletable(s) {
					// Kept as dead code so that the imports and variables it uses stay
					// used: the mutant removes the effect and still compiles.
					add("delete", s.Pos(), s.End(), "if false { "+string(src[off(s.Pos()):off(s.End())])+" }")
				}
			}
		case *ast.BinaryExpr:
			if to, ok := negations[n.Op]; ok {
				add("negate", n.OpPos, n.OpPos+token.Pos(len(n.Op.String())), to.String())
			}
		case *ast.Ident:
			if n.Name == "true" {
				add("bool", n.Pos(), n.End(), "false")
			} else if n.Name == "false" {
				add("bool", n.Pos(), n.End(), "true")
			}
		case *ast.BasicLit:
			if n.Kind == token.INT {
				add("constant", n.Pos(), n.End(), "("+n.Value+"+1)")
			}
		}
		return true
	})
	return ms, nil
}

// deletable: a call made for its effect, or an assignment to something that already exists
// (x = append(x, ...), s.f = v, x += n). Declarations, returns and control flow are left
// alone: deleting them rarely compiles.
func deletable(s ast.Stmt) bool {
	switch s := s.(type) {
	case *ast.ExprStmt:
		_, ok := s.X.(*ast.CallExpr)
		return ok
	case *ast.AssignStmt:
		return s.Tok != token.DEFINE
	case *ast.IncDecStmt:
		return true
	}
	return false
}

// Survivors keeps the mutants a report lists as survived.
func Survivors(ms []Mutant, report string) []Mutant {
	listed := map[string]bool{}
	in := false
	for _, l := range strings.Split(report, "\n") {
		switch {
		case strings.HasSuffix(l, ":") && !strings.HasPrefix(l, " "):
			in = l == string(Survived)+":"
		case in:
			listed[strings.TrimSpace(l)] = true
		}
	}
	var out []Mutant
	for _, m := range ms {
		if listed[m.String()] {
			out = append(out, m)
		}
	}
	return out
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

func apply(src []byte, m Mutant) []byte {
	var b bytes.Buffer
	b.Write(src[:m.Start])
	b.WriteString(m.With)
	b.Write(src[m.End:])
	return b.Bytes()
}

func testAll(ms []Mutant, tmp string, budget, perMutant time.Duration, workers int, run string, kernel bool) []Result {
	deadline := time.Now().Add(budget)
	res := make([]Result, len(ms))
	next := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for w := 0; w < max(workers, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				res[i] = testOne(ms[i], filepath.Join(tmp, fmt.Sprint(i)), perMutant, run, kernel)
				mu.Lock()
				done++
				fmt.Fprintf(os.Stderr, "[%d/%d] %s %s\n", done, len(ms), res[i].Status, ms[i])
				mu.Unlock()
			}
		}()
	}
	for i := range ms {
		if time.Now().After(deadline) {
			for j := i; j < len(ms); j++ {
				res[j] = Result{Mutant: ms[j], Status: NotRun}
			}
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	return res
}

func testOne(m Mutant, dir string, perMutant time.Duration, run string, kernel bool) Result {
	r := Result{Mutant: m}
	src, err := os.ReadFile(m.File)
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	mutated := filepath.Join(dir, filepath.Base(m.File))
	if err == nil {
		err = os.WriteFile(mutated, apply(src, m), 0o644)
	}
	abs, _ := filepath.Abs(m.File)
	overlay := filepath.Join(dir, "overlay.json")
	if err == nil {
		var js []byte
		js, err = json.Marshal(map[string]any{"Replace": map[string]string{abs: mutated}})
		if err == nil {
			err = os.WriteFile(overlay, js, 0o644)
		}
	}
	if err != nil {
		r.Status, r.By = NoBuild, err.Error()
		return r
	}
	ctx, cancel := context.WithTimeout(context.Background(), perMutant)
	defer cancel()
	args := []string{"test", "-count=1", "-failfast", "-overlay", overlay}
	if run != "" {
		args = append(args, "-run", run)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, "./"+filepath.Clean(m.Dir))...)
	cmd.Env = os.Environ()
	if !kernel {
		cmd.Env = append(cmd.Env, "NFTPROXY_UNIT_ONLY=1")
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	defer os.RemoveAll(dir)
	text := out.String()
	switch {
	case err == nil:
		r.Status = Survived
	case ctx.Err() != nil:
		r.Status, r.By = Killed, "timeout"
	case strings.Contains(text, "[build failed]") || strings.Contains(text, "[setup failed]"):
		r.Status = NoBuild
	default:
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			r.Status, r.By = NoBuild, err.Error()
			return r
		}
		r.Status, r.By = Killed, firstFailure(text)
	}
	return r
}

func firstFailure(text string) string {
	for _, l := range strings.Split(text, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "--- FAIL: ") {
			return strings.Fields(strings.TrimPrefix(t, "--- FAIL: "))[0]
		}
	}
	return "package"
}

func count(res []Result) map[Status]int {
	c := map[Status]int{}
	for _, r := range res {
		c[r.Status]++
	}
	return c
}

// Summary is the score line: killed / (killed + survived); mutants that do not compile are
// not counted, those not run for lack of time are shown.
func Summary(res []Result) string {
	c := count(res)
	tested := c[Killed] + c[Survived]
	score := 0.0
	if tested > 0 {
		score = 100 * float64(c[Killed]) / float64(tested)
	}
	return fmt.Sprintf("mutants: %d found, %d killed, %d survived, %d did not compile, %d not run; score %.1f%%\n",
		len(res), c[Killed], c[Survived], c[NoBuild], c[NotRun], score)
}

// Report is Summary followed by every survivor, then every mutant not run.
func Report(res []Result) string {
	var b strings.Builder
	b.WriteString(Summary(res))
	for _, st := range []Status{Survived, NotRun} {
		fmt.Fprintf(&b, "\n%s:\n", st)
		for _, r := range res {
			if r.Status == st {
				fmt.Fprintf(&b, "  %s\n", r.Mutant)
			}
		}
	}
	return b.String()
}
