package nft

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/golden"
)

// The conformance cases say what the kernel does with a sequence of transactions: which succeed,
// which fail (errno class and failing op), and what the tables hold after each step, compared
// by rendered text. Every questionable behaviour in them was checked against Linux 6.18 with the
// nft CLI in a throwaway namespace. TestFakeConformance runs them on the Fake; the kernel tests
// run them on the netlink implementation: the two must agree exactly.

// confTables are the tables the cases use; the state after a step is their rendered text, in
// this order, missing tables rendering nothing.
var confTables = []Table{{Family: IPv4, Name: "nftproxy"}, {Family: IPv6, Name: "nftproxy"}}

// confSame as a step's want means "what the previous step left".
const confSame = "<unchanged>"

type confCase struct {
	name  string
	steps []confStep
}

type confStep struct {
	// ops build the transaction; it starts on confTables[0].
	ops []confBuild
	// err is nil for success, else the expected failure.
	err *confErr
	// want is the rendered state afterwards (confSame: unchanged).
	want string
	// check, if set, inspects the kernel after the step.
	check func(t *testing.T, k Interface)
}

type confErr struct {
	class string // "notfound", "exists", "busy", "invalid" or an errno name
	index int
}

// confBuild adds to the transaction; c reads the current state (rule handles).
type confBuild func(tx *Transaction, c *confCtx)

type confCtx struct {
	t *testing.T
	k Interface
}

// handle finds the handle of the rule with comment in chain of table t.
func (c *confCtx) handle(t Table, chain, comment string) uint64 {
	c.t.Helper()
	rs, err := c.k.Dump(context.Background(), t)
	if err != nil {
		c.t.Fatalf("dump %s to find rule %q: %v", t, comment, err)
	}
	for _, r := range rs.Rules {
		if r.Chain == chain && r.Comment == comment {
			return r.Handle
		}
	}
	c.t.Fatalf("no rule with comment %q in chain %s of %s", comment, chain, t)
	return 0
}

func confMatch(class string, err error) bool {
	switch class {
	case "notfound":
		return IsNotFound(err)
	case "exists":
		return IsExists(err)
	case "busy":
		return IsBusy(err)
	case "invalid":
		return IsInvalid(err)
	}
	var op *OpError
	if !errors.As(err, &op) {
		return false
	}
	return fmt.Sprint(op.Err) == class
}

// confState renders every conformance table the kernel holds.
func confState(t *testing.T, k Interface) string {
	t.Helper()
	var b strings.Builder
	for _, tb := range confTables {
		rs, err := k.Dump(context.Background(), tb)
		if IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatalf("dump %s: %v", tb, err)
		}
		b.WriteString(Render(rs))
	}
	return b.String()
}

// runConformance runs every case on a fresh kernel from open.
func runConformance(t *testing.T, open func(t *testing.T) Interface) {
	runConformanceCases(t, open, confCases(), nil)
}

func runConformanceCases(t *testing.T, open func(t *testing.T) Interface, cases []confCase, record func(Op)) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k := open(t)
			c := &confCtx{t: t, k: k}
			prev := ""
			for i, st := range tc.steps {
				tx := NewTransaction(confTables[0])
				for _, b := range st.ops {
					b(tx, c)
				}
				if record != nil {
					for _, op := range tx.Ops {
						record(op)
					}
				}
				_, err := k.Apply(context.Background(), tx)
				confCheckErr(t, i, tx, st.err, err)
				got := confState(t, k)
				want := st.want
				if want == confSame {
					want = prev
				}
				if got != want {
					t.Fatalf("step %d: state differs (- want, + got):\n%s\ngot:\n%s\nwant:\n%s", i, golden.Diff(want, got), got, want)
				}
				if st.check != nil {
					st.check(t, k)
				}
				prev = got
			}
		})
	}
}

func confCheckErr(t *testing.T, step int, tx *Transaction, want *confErr, got error) {
	t.Helper()
	if want == nil {
		if got != nil {
			t.Fatalf("step %d: Apply: got error %v, want success", step, got)
		}
		return
	}
	if got == nil {
		t.Fatalf("step %d: Apply succeeded, want a %s error at op %d (%s)", step, want.class, want.index, confOpText(tx, want.index))
	}
	var op *OpError
	if !errors.As(got, &op) {
		t.Fatalf("step %d: got error %v (%T), want an *OpError", step, got, got)
	}
	if !confMatch(want.class, got) || op.Index != want.index {
		t.Fatalf("step %d: got error %v (errno %q at op %d), want class %s at op %d (%s)", step, got, fmt.Sprint(op.Err), op.Index, want.class, want.index, confOpText(tx, want.index))
	}
}

func confOpText(tx *Transaction, i int) string {
	if i < 0 || i >= len(tx.Ops) {
		return "no such op"
	}
	return fakeOpName(tx.Ops[i]) + " " + fakeDescribe(tx.Ops[i].Table, tx.Ops[i].Object)
}

func TestFakeConformance(t *testing.T) {
	runConformance(t, func(t *testing.T) Interface { return NewFake() })
}

// confAllExprs holds a zero value of every Expr type; TestConformanceCoverage checks it against
// expr.go, so a new expression type cannot be added without conformance cases and a renderer.
func confAllExprs() []Expr {
	return []Expr{Cmp{}, CmpPrefix{}, CmpSet{}, VMap{}, MarkTest{}, CtState{}, CtStatus{},
		FibAddrType{}, MarkOr{}, MarkXor{}, Masquerade{}, DNAT{}, DNATNumgen{}, DNATMap{}, NumgenMatch{}, Reject{},
		SetUpdate{}, Verdict{}, SocketMatch{}, Redirect{}, Unknown{}}
}

// confVerbs is every verb each object kind takes; the others must be refused.
func confVerbs() map[string][]Verb {
	return map[string][]Verb{
		"table":   {VerbAdd, VerbDelete},
		"chain":   {VerbAdd, VerbDelete, VerbFlush},
		"set":     {VerbAdd, VerbDelete, VerbFlush},
		"element": {VerbAdd, VerbDelete},
		"rule":    {VerbAdd, VerbDelete},
	}
}

// TestConformanceCoverage fails when an Expr type of expr.go is missing from confAllExprs, is not
// used by a conformance case (Unknown, which is never sent, excepted: a case checks it is
// refused), or is not rendered; and when a verb/object pair is not exercised.
func TestConformanceCoverage(t *testing.T) {
	declared := confDeclaredExprTypes(t)
	var listed []string
	for _, e := range confAllExprs() {
		listed = append(listed, reflect.TypeOf(e).Name())
		if out := renderExpr(IPv4, e); strings.Contains(out, "%unrenderable-expression%") {
			t.Errorf("Render does not handle %T: got %q", e, out)
		}
	}
	slices.Sort(listed)
	if !slices.Equal(declared, listed) {
		t.Fatalf("Expr types in expr.go: got %v, confAllExprs lists %v: update confAllExprs and the cases", declared, listed)
	}

	used := map[string]bool{}
	verbs := map[string]bool{}
	runConformanceCases(t, func(t *testing.T) Interface { return NewFake() }, confCases(), func(op Op) {
		verbs[fakeOpName(op)] = true
		if r, ok := op.Object.(*Rule); ok && op.Verb == VerbAdd {
			for _, e := range r.Exprs {
				used[reflect.TypeOf(e).Name()] = true
			}
		}
	})
	for _, name := range listed {
		if !used[name] {
			t.Errorf("no conformance case adds a rule with a %s expression", name)
		}
	}
	for kind, vs := range confVerbs() {
		for _, v := range []Verb{VerbAdd, VerbDelete, VerbFlush} {
			if !verbs[v.String()+" "+kind] {
				t.Errorf("no conformance case does %q (allowed: %v)", v.String()+" "+kind, slices.Contains(vs, v))
			}
		}
	}
}

// confDeclaredExprTypes parses expr.go for the types that implement Expr (have isExpr).
func confDeclaredExprTypes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "expr.go", nil, 0)
	if err != nil {
		t.Fatalf("parse expr.go: %v", err)
	}
	var out []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "isExpr" || fn.Recv == nil || len(fn.Recv.List) != 1 {
			continue
		}
		typ := fn.Recv.List[0].Type
		if star, ok := typ.(*ast.StarExpr); ok {
			typ = star.X
		}
		if id, ok := typ.(*ast.Ident); ok {
			out = append(out, id.Name)
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		t.Fatal("found no isExpr methods in expr.go")
	}
	return out
}
