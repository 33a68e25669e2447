package nft

import (
	"slices"
	"syscall"
)

// apply performs op i on the working state.
func (w *fakeTx) apply(i int, op Op) error {
	if p, ok := op.Object.(*Packed); ok { // the Fake keeps elements in their own memory
		e := p.Unpack()
		op.Object = &e
	}
	if op.Object == nil {
		return fakeErr(i, op, syscall.EINVAL, "the op has no object")
	}
	if _, ok := op.Object.(*TableObj); ok {
		return w.applyTable(i, op)
	}
	if err := checkOpStrings(op); err != nil {
		return fakeErr(i, op, syscall.EINVAL, "%v", err)
	}
	ft := w.table(op.Table)
	if ft == nil {
		return fakeErr(i, op, syscall.ENOENT, "table %s does not exist: add the table first", op.Table)
	}
	switch x := op.Object.(type) {
	case *Chain:
		return w.applyChain(i, op, ft, x)
	case *Set:
		return w.applySet(i, op, ft, x)
	case *Element:
		return w.applyElement(i, op, ft, x)
	case *Rule:
		return w.applyRule(i, op, ft, x)
	}
	return fakeErr(i, op, syscall.EINVAL, "unknown object type %T", op.Object)
}

func (w *fakeTx) applyTable(i int, op Op) error {
	if op.Table.Name == "" || (op.Table.Family != IPv4 && op.Table.Family != IPv6) {
		return fakeErr(i, op, syscall.EINVAL, "a table needs a name and the family ip or ip6")
	}
	switch op.Verb {
	case VerbAdd:
		if w.tables[op.Table] == nil {
			w.tables[op.Table] = newFakeTable()
			w.cloned[op.Table] = true
			w.touched = append(w.touched, op.Table)
		}
		return nil
	case VerbDelete:
		if w.tables[op.Table] == nil {
			return fakeErr(i, op, syscall.ENOENT, "table %s does not exist", op.Table)
		}
		delete(w.tables, op.Table)
		delete(w.cloned, op.Table)
		return nil
	}
	return fakeErr(i, op, syscall.EINVAL, "a table can only be added or deleted; flush its chains and sets one by one")
}

func (w *fakeTx) applyChain(i int, op Op, ft *fakeTable, c *Chain) error {
	if c.Name == "" {
		return fakeErr(i, op, syscall.EINVAL, "a chain needs a name")
	}
	cur := ft.chains[c.Name]
	switch op.Verb {
	case VerbAdd:
		if c.Base != nil {
			if err := fakeCheckBase(i, op, c.Base); err != nil {
				return err
			}
		}
		if cur == nil {
			ft.handle++
			ft.chains[c.Name] = &fakeChain{chain: fakeCopyChain(*c)}
			return nil
		}
		return fakeUpdateChain(i, op, cur, c)
	case VerbDelete, VerbFlush:
		if cur == nil {
			return fakeErr(i, op, syscall.ENOENT, "chain %s does not exist in table %s", c.Name, op.Table)
		}
		for _, r := range cur.rules {
			ft.release(r)
		}
		cur.rules = nil
		if op.Verb == VerbFlush {
			return nil
		}
		if n := ft.chainRefs[c.Name]; n > 0 {
			return fakeErr(i, op, syscall.EBUSY, "chain %s is still the target of %d jump/goto verdicts (rules or map elements): remove them in the same transaction first", c.Name, n)
		}
		delete(ft.chains, c.Name)
		return nil
	}
	return fakeErr(i, op, syscall.EINVAL, "verb %s does not apply to a chain", op.Verb)
}

// fakeCheckBase refuses hook and type combinations the kernel refuses.
func fakeCheckBase(i int, op Op, b *BaseChain) error {
	switch b.Hook {
	case HookPrerouting, HookInput, HookForward, HookOutput, HookPostrouting:
	default:
		return fakeErr(i, op, syscall.EOPNOTSUPP, "unknown hook %q", b.Hook)
	}
	switch b.Type {
	case ChainTypeFilter:
	case ChainTypeNAT:
		if b.Hook == HookForward {
			return fakeErr(i, op, syscall.EOPNOTSUPP, "a nat chain cannot hook forward")
		}
		if b.Priority <= -200 {
			return fakeErr(i, op, syscall.EOPNOTSUPP, "a nat chain needs a priority above conntrack's (-200), has %d", b.Priority)
		}
	default:
		return fakeErr(i, op, syscall.EOPNOTSUPP, "unknown chain type %q", b.Type)
	}
	switch b.Policy {
	case "", PolicyAccept, PolicyDrop:
	default:
		return fakeErr(i, op, syscall.EINVAL, "unknown policy %q", b.Policy)
	}
	return nil
}

// fakeUpdateChain is an add of an existing chain: the kernel keeps it, may change a base chain's
// policy, and refuses a different type (EEXIST) or hook or priority (EOPNOTSUPP).
func fakeUpdateChain(i int, op Op, cur *fakeChain, c *Chain) error {
	if c.Base == nil {
		return nil // adding a regular chain over an existing one (base or not) changes nothing
	}
	old := cur.chain.Base
	if old == nil {
		return fakeErr(i, op, syscall.EEXIST, "chain %s exists as a regular chain; delete it before adding it as a base chain", c.Name)
	}
	if old.Type != c.Base.Type {
		return fakeErr(i, op, syscall.EEXIST, "base chain %s exists with type %s, not %s: delete it first", c.Name, old.Type, c.Base.Type)
	}
	if old.Hook != c.Base.Hook || old.Priority != c.Base.Priority {
		return fakeErr(i, op, syscall.EOPNOTSUPP, "base chain %s exists with hook %s priority %d: delete it before changing hook or priority", c.Name, old.Hook, old.Priority)
	}
	nb := *old
	nb.Policy = c.Base.Policy
	if nb.Policy == "" {
		nb.Policy = PolicyAccept
	}
	cur.chain.Base = &nb
	return nil
}

func (w *fakeTx) applySet(i int, op Op, ft *fakeTable, s *Set) error {
	if s.Name == "" {
		return fakeErr(i, op, syscall.EINVAL, "a set needs a name")
	}
	cur := ft.sets[s.Name]
	switch op.Verb {
	case VerbAdd:
		if err := fakeCheckSet(i, op, s); err != nil {
			return err
		}
		if cur == nil {
			ft.handle++
			ns := *s
			ns.Key, ns.Data = slices.Clone(s.Key), slices.Clone(s.Data)
			ft.sets[s.Name] = &fakeSet{set: ns, elems: map[string]Element{}}
			return nil
		}
		if !fakeSameSetShape(&cur.set, s) {
			return fakeErr(i, op, syscall.EEXIST, "set %s exists with another type or flags: delete it before adding it with a new shape", s.Name)
		}
		// The kernel keeps the comment (userdata) and takes the new default timeout.
		cur.set.Timeout = s.Timeout
		return nil
	case VerbDelete, VerbFlush:
		if cur == nil {
			return fakeErr(i, op, syscall.ENOENT, "set %s does not exist in table %s", s.Name, op.Table)
		}
		if op.Verb == VerbDelete {
			if n := ft.setRefs[s.Name]; n > 0 {
				return fakeErr(i, op, syscall.EBUSY, "set %s is still used by %d rule expressions: delete those rules in the same transaction first", s.Name, n)
			}
		}
		for _, e := range cur.elems {
			ft.releaseElement(e)
		}
		if op.Verb == VerbDelete {
			delete(ft.sets, s.Name)
			return nil
		}
		cur.elems, cur.byFirst, cur.wide = map[string]Element{}, nil, nil
		return nil
	}
	return fakeErr(i, op, syscall.EINVAL, "verb %s does not apply to a set", op.Verb)
}

func fakeCheckSet(i int, op Op, s *Set) error {
	if len(s.Key) == 0 {
		return fakeErr(i, op, syscall.EINVAL, "set %s has no key type", s.Name)
	}
	klen := 0
	for _, t := range s.Key {
		n := fakeTypeLen(t)
		if n == 0 {
			return fakeErr(i, op, syscall.EINVAL, "set %s: %s cannot be part of a key", s.Name, t)
		}
		klen += n
	}
	if klen > 64 {
		return fakeErr(i, op, syscall.EINVAL, "set %s: key of %d bytes is longer than the kernel's 64", s.Name, klen)
	}
	for _, t := range s.Data {
		if t == TypeVerdict {
			if len(s.Data) != 1 {
				return fakeErr(i, op, syscall.EINVAL, "set %s: verdict must be a map's only data type", s.Name)
			}
			continue
		}
		if fakeTypeLen(t) == 0 {
			return fakeErr(i, op, syscall.EINVAL, "set %s: unknown data type %s", s.Name, t)
		}
	}
	if s.Timeout < 0 {
		return fakeErr(i, op, syscall.EINVAL, "set %s: negative timeout", s.Name)
	}
	return nil
}

// fakeTypeLen is a field's size in a key, padded to 32 bits as in a concatenation; 0 for a type
// that cannot be a key field.
func fakeTypeLen(t Type) int {
	switch t {
	case TypeIPv4Addr, TypeInetProto, TypeInetService, TypeMark, TypeInteger:
		return 4
	case TypeIPv6Addr:
		return 16
	}
	return 0
}

// fakeSameSetShape is what the kernel compares when a set is added again: types and flags, not
// the comment, the default timeout's value or nft's userdata.
func fakeSameSetShape(a, b *Set) bool {
	return slices.Equal(a.Key, b.Key) && slices.Equal(a.Data, b.Data) && a.Interval == b.Interval &&
		a.Dynamic == b.Dynamic && (a.HasTimeout || a.Timeout > 0) == (b.HasTimeout || b.Timeout > 0)
}

func (w *fakeTx) applyRule(i int, op Op, ft *fakeTable, r *Rule) error {
	ch := ft.chains[r.Chain]
	switch op.Verb {
	case VerbAdd:
		if ch == nil {
			return fakeErr(i, op, syscall.ENOENT, "chain %s does not exist in table %s: add it before its rules", r.Chain, op.Table)
		}
		if err := fakeCheckRule(i, op, ft, r); err != nil {
			return err
		}
		ft.handle++
		nr := Rule{Chain: r.Chain, Comment: r.Comment, Handle: ft.handle, Exprs: fakeCopyExprs(r.Exprs)}
		ch.rules = append(ch.rules, nr)
		ft.hold(nr)
		fakeDynsetDefaultSize(ft, nr)
		return nil
	case VerbDelete:
		if r.Handle == 0 {
			return fakeErr(i, op, syscall.EINVAL, "a rule is deleted by its handle (from Dump); the handle is 0")
		}
		if ch == nil {
			return fakeErr(i, op, syscall.ENOENT, "chain %s does not exist in table %s", r.Chain, op.Table)
		}
		for k, cur := range ch.rules {
			if cur.Handle == r.Handle {
				ft.release(cur)
				ch.rules = slices.Delete(ch.rules, k, k+1)
				return nil
			}
		}
		return fakeErr(i, op, syscall.ENOENT, "chain %s has no rule with handle %d", r.Chain, r.Handle)
	}
	return fakeErr(i, op, syscall.EINVAL, "a rule can only be added or deleted; flush its chain instead")
}

// fakeCopyExprs copies the slices inside expressions so the caller may reuse its own.
func fakeCopyExprs(in []Expr) []Expr {
	out := make([]Expr, len(in))
	for k, e := range in {
		switch x := e.(type) {
		case CmpSet:
			x.Fields = slices.Clone(x.Fields)
			e = x
		case VMap:
			x.Fields = slices.Clone(x.Fields)
			e = x
		case SetUpdate:
			x.Fields, x.Data, x.DataFields = slices.Clone(x.Fields), slices.Clone(x.Data), slices.Clone(x.DataFields)
			e = x
		case DNATMap:
			x.Fields = slices.Clone(x.Fields)
			e = x
		case DNATNumgen:
			x.Key = slices.Clone(x.Key)
			e = x
		}
		out[k] = e
	}
	return out
}

// fakeRuleRefs lists the chains and sets a rule names.
func fakeRuleRefs(r Rule) (chains, sets []string) {
	for _, e := range r.Exprs {
		switch x := e.(type) {
		case Verdict:
			if x.Kind == VerdictJump || x.Kind == VerdictGoto {
				chains = append(chains, x.Chain)
			}
		case CmpSet:
			sets = append(sets, x.Set)
		case VMap:
			sets = append(sets, x.Map)
		case DNATNumgen:
			sets = append(sets, x.Map)
		case SetUpdate:
			sets = append(sets, x.Set)
		case DNATMap:
			sets = append(sets, x.Map)
		}
	}
	return chains, sets
}

func (ft *fakeTable) hold(r Rule) {
	chains, sets := fakeRuleRefs(r)
	for _, c := range chains {
		ft.chainRefs[c]++
	}
	for _, s := range sets {
		ft.setRefs[s]++
	}
}

func (ft *fakeTable) release(r Rule) {
	chains, sets := fakeRuleRefs(r)
	for _, c := range chains {
		fakeDec(ft.chainRefs, c)
	}
	for _, s := range sets {
		fakeDec(ft.setRefs, s)
	}
}

func (ft *fakeTable) holdElement(e Element) {
	if e.Verdict != nil && (e.Verdict.Kind == VerdictJump || e.Verdict.Kind == VerdictGoto) {
		ft.chainRefs[e.Verdict.Chain]++
	}
}

func (ft *fakeTable) releaseElement(e Element) {
	if e.Verdict != nil && (e.Verdict.Kind == VerdictJump || e.Verdict.Kind == VerdictGoto) {
		fakeDec(ft.chainRefs, e.Verdict.Chain)
	}
}

func fakeDec(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}

// fakeDynsetDefaultSize is what the kernel does when an update statement binds a set without a
// size: it gives the set its default bound, 65535 elements, which a read-back then reports.
func fakeDynsetDefaultSize(ft *fakeTable, r Rule) {
	for _, e := range r.Exprs {
		if u, ok := e.(SetUpdate); ok {
			if fs := ft.sets[u.Set]; fs != nil && fs.set.Size == 0 {
				fs.set.Size = DynsetDefaultSize
			}
		}
	}
}
