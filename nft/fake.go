package nft

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"syscall"
	"time"
)

// Fake is an in-memory Interface for tests of everything above the kernel layer. It applies a
// transaction to a copy of its state and keeps the copy only if every operation succeeds, and it
// refuses what the kernel (Linux 6.18) refuses, with the same errno, so code tested against it
// behaves the same on a real node. The cases in conformance_test.go run on both and must agree.
//
// What it checks, as the kernel does: the table must exist for anything in it; a rule or map
// element must not name a missing chain or set (ENOENT) nor jump to a base chain (EOPNOTSUPP);
// element keys and data must fit their set (EINVAL); an element whose key exists with other data,
// or whose interval overlaps another, fails (EEXIST); deleting what is missing fails (ENOENT);
// deleting a chain or set still referenced fails (EBUSY); a chain deleted with rules loses them;
// an update with a timeout needs a set with the timeout flag (EOPNOTSUPP); NAT and reject
// statements must only be reachable from base chains whose type and hook allow them
// (EOPNOTSUPP), and jumps may not nest 16 deep or loop (EMLINK).
//
// Where it is stricter than the kernel (the kernel sees only byte lengths), it refuses with
// EINVAL: a key or a lookup whose field types differ from the set's even if their sizes match.
//
// Like the kernel Interface, a Fake is not safe for concurrent use.
type Fake struct {
	tables map[Table]*fakeTable
	// Applied counts the transactions committed, Refused those that failed; tests use them to
	// check that a sync did (or did not) touch the kernel.
	Applied, Refused int
	// RefuseOp, when set, is asked about each op of a transaction just before the op is applied;
	// a non-zero errno refuses that op, as the kernel refuses one message part-way through a
	// batch: the ops before it were applied to the working copy, and the whole transaction is
	// dropped. Tests inject kernel refusals with it.
	RefuseOp func(op Op) syscall.Errno
}

// NewFake returns an empty fake kernel: no tables.
func NewFake() *Fake { return &Fake{tables: map[Table]*fakeTable{}} }

var _ Interface = (*Fake)(nil)

type fakeTable struct {
	chains map[string]*fakeChain
	sets   map[string]*fakeSet
	// chainRefs and setRefs count references from rules and map elements; a referenced object
	// cannot be deleted.
	chainRefs map[string]int
	setRefs   map[string]int
	handle    uint64
}

type fakeChain struct {
	chain Chain
	rules []Rule
}

type fakeSet struct {
	set   Set
	elems map[string]Element // by fakeElemKey
	// byFirst indexes interval elements whose first field is a single value; wide holds the
	// others. Overlap checks look only where an overlap can be.
	byFirst map[Value]map[string]struct{}
	wide    map[string]struct{}
}

func newFakeTable() *fakeTable {
	return &fakeTable{
		chains: map[string]*fakeChain{}, sets: map[string]*fakeSet{},
		chainRefs: map[string]int{}, setRefs: map[string]int{},
	}
}

func (t *fakeTable) clone() *fakeTable {
	c := &fakeTable{
		chains:    make(map[string]*fakeChain, len(t.chains)),
		sets:      make(map[string]*fakeSet, len(t.sets)),
		chainRefs: maps.Clone(t.chainRefs),
		setRefs:   maps.Clone(t.setRefs),
		handle:    t.handle,
	}
	for n, ch := range t.chains {
		c.chains[n] = &fakeChain{chain: ch.chain, rules: slices.Clone(ch.rules)}
	}
	for n, s := range t.sets {
		s2 := &fakeSet{set: s.set, elems: maps.Clone(s.elems), wide: maps.Clone(s.wide)}
		if s.byFirst != nil {
			s2.byFirst = make(map[Value]map[string]struct{}, len(s.byFirst))
			for v, m := range s.byFirst {
				s2.byFirst[v] = maps.Clone(m)
			}
		}
		c.sets[n] = s2
	}
	return c
}

// fakeTx is the working state of one Apply: tables are cloned the first time an op touches them.
type fakeTx struct {
	tables  map[Table]*fakeTable
	cloned  map[Table]bool
	touched []Table
	// refuse is the Fake's RefuseOp.
	refuse func(op Op) syscall.Errno
	// validateEach makes every add check reachability at once (the replay that finds which op
	// broke a rule of the table, as the kernel does after a failed commit-time validation).
	validateEach bool
}

func (f *Fake) begin() *fakeTx {
	return &fakeTx{tables: maps.Clone(f.tables), cloned: map[Table]bool{}, refuse: f.RefuseOp}
}

// table returns the working copy of t, or nil if t does not exist.
func (w *fakeTx) table(t Table) *fakeTable {
	ft := w.tables[t]
	if ft == nil {
		return nil
	}
	if !w.cloned[t] {
		ft = ft.clone()
		w.tables[t] = ft
		w.cloned[t] = true
		w.touched = append(w.touched, t)
	}
	return ft
}

// Apply commits tx atomically. A failure is an *OpError naming the refused operation, wrapped
// as the Kernel wraps it ("apply transaction (N ops): ...").
func (f *Fake) Apply(ctx context.Context, tx *Transaction) (Stats, error) {
	st, err := f.apply(ctx, tx)
	if err != nil && tx != nil {
		err = fmt.Errorf("apply transaction (%d ops): %w", tx.Len(), err)
	} else if err != nil {
		err = fmt.Errorf("apply transaction: %w", err)
	}
	return st, err
}

func (f *Fake) apply(ctx context.Context, tx *Transaction) (Stats, error) {
	start := time.Now()
	if err := ctx.Err(); err != nil {
		return Stats{}, err
	}
	if tx == nil || tx.Len() == 0 {
		return Stats{}, nil
	}
	st := Stats{Ops: tx.Len(), Messages: tx.Len() + 2}
	w := f.begin()
	if err := w.run(tx); err != nil {
		f.Refused++
		return st, err
	}
	if err := w.validate(); err != nil {
		// The kernel validates jumps and hooks when it commits, then replays the batch checking
		// after each message, so the error names the op that made the table invalid.
		replay := f.begin()
		replay.validateEach = true
		if rerr := replay.run(tx); rerr != nil {
			err = rerr
		}
		f.Refused++
		return st, err
	}
	f.tables = w.tables
	f.Applied++
	st.Duration = time.Since(start)
	return st, nil
}

func (w *fakeTx) run(tx *Transaction) error {
	for i, op := range tx.All() {
		if w.refuse != nil {
			if errno := w.refuse(op); errno != 0 {
				return fakeErr(i, op, errno, "refused by the test's RefuseOp")
			}
		}
		if err := w.apply(i, op); err != nil {
			return err
		}
		if w.validateEach && op.Verb == VerbAdd {
			switch op.Object.(type) {
			case *Rule, *Element:
				if ft := w.tables[op.Table]; ft != nil {
					if err := fakeValidateTable(op.Table, ft); err != nil {
						err.Index, err.Op, err.Object = i, fakeOpName(op), fakeDescribe(op.Table, op.Object)
						return err
					}
				}
			}
		}
	}
	return nil
}

func (w *fakeTx) validate() error {
	for _, t := range w.touched {
		if ft := w.tables[t]; ft != nil {
			if err := fakeValidateTable(t, ft); err != nil {
				return err
			}
		}
	}
	return nil
}

// Dump returns what table t holds, in canonical order (see Canonical).
func (f *Fake) Dump(ctx context.Context, t Table) (*Ruleset, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dump table %s: %w", t, err)
	}
	ft := f.tables[t]
	if ft == nil {
		return nil, fmt.Errorf("dump table %s: table does not exist (create it with an add of TableObj): %w", t, syscall.ENOENT)
	}
	rs := &Ruleset{Table: t, Elements: map[string][]Element{}}
	for _, ch := range ft.chains {
		rs.Chains = append(rs.Chains, fakeCopyChain(ch.chain))
		rs.Rules = append(rs.Rules, ch.rules...)
	}
	for _, s := range ft.sets {
		rs.Sets = append(rs.Sets, s.set)
		for _, e := range s.elems {
			rs.Elements[s.set.Name] = append(rs.Elements[s.set.Name], e)
		}
	}
	// Rules were appended chain by chain; Canonical orders chains and keeps each chain's rules
	// in order, which is all the order a dump has.
	return Canonical(rs), nil
}

// ListTables returns the names of the tables of family fam, sorted.
func (f *Fake) ListTables(ctx context.Context, fam Family) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	var names []string
	for t := range f.tables {
		if t.Family == fam {
			names = append(names, t.Name)
		}
	}
	slices.Sort(names)
	return names, nil
}

func fakeCopyChain(c Chain) Chain {
	if c.Base != nil {
		b := *c.Base
		c.Base = &b
	}
	return c
}

// fakeErr builds the error of op i.
func fakeErr(i int, op Op, errno syscall.Errno, format string, args ...any) *OpError {
	return &OpError{
		Index: i, Op: fakeOpName(op), Object: fakeDescribe(op.Table, op.Object),
		Err: errno, Detail: fmt.Sprintf(format, args...),
	}
}

func fakeOpName(op Op) string {
	kind := "object"
	if op.Object != nil {
		kind = op.Object.objectKind()
	}
	return op.Verb.String() + " " + kind
}

// fakeDescribe names an object the way nft would, so an error message can be looked up.
func fakeDescribe(t Table, o Object) string {
	if p, ok := o.(*Packed); ok {
		e := p.Unpack()
		o = &e
	}
	switch x := o.(type) {
	case *TableObj:
		return "table " + t.String()
	case *Chain:
		return "chain " + t.String() + " " + x.Name
	case *Set:
		return "set " + t.String() + " " + x.Name
	case *Element:
		return fmt.Sprintf("element %s %s { %s }", t, x.Set, renderElement(*x))
	case *Rule:
		if x.Handle != 0 && len(x.Exprs) == 0 {
			return fmt.Sprintf("rule %s %s handle %d", t, x.Chain, x.Handle)
		}
		return fmt.Sprintf("rule %s %s { %s }", t, x.Chain, RenderRule(t.Family, *x))
	}
	return fmt.Sprintf("%T in table %s", o, t)
}

// DumpSetElements reads back the elements of set in table t (see SetElementsDumper).
func (f *Fake) DumpSetElements(ctx context.Context, t Table, set string) ([]Element, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("dump set %s of table %s: %w", set, t, err)
	}
	ft := f.tables[t]
	if ft == nil || ft.sets[set] == nil {
		return nil, fmt.Errorf("dump set %s of table %s: %w", set, t, syscall.ENOENT)
	}
	var out []Element
	for _, e := range ft.sets[set].elems {
		out = append(out, e)
	}
	return out, nil
}

// DumpPacked is Dump with the elements handed to each, packed (see PackedDumper).
func (f *Fake) DumpPacked(ctx context.Context, t Table, each func(Packed)) (*Ruleset, error) {
	rs, err := f.Dump(ctx, t)
	if err != nil {
		return nil, err
	}
	for _, els := range rs.Elements {
		for i := range els {
			each(Pack(&els[i]))
		}
	}
	rs.Elements = nil
	return rs, nil
}
