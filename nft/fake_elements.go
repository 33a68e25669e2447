package nft

import (
	"slices"
	"syscall"
)

func (w *fakeTx) applyElement(i int, op Op, ft *fakeTable, e *Element) error {
	fs := ft.sets[e.Set]
	if fs == nil {
		return fakeErr(i, op, syscall.ENOENT, "set %s does not exist in table %s: add it before its elements", e.Set, op.Table)
	}
	s := &fs.set
	if err := fakeCheckKey(i, op, s, "key", e.Key); err != nil {
		return err
	}
	if e.KeyEnd != nil {
		if !s.Interval {
			return fakeErr(i, op, syscall.EINVAL, "set %s has no interval flag: an element cannot have a key end", s.Name)
		}
		if err := fakeCheckKey(i, op, s, "key end", e.KeyEnd); err != nil {
			return err
		}
		for k := range e.Key {
			if CompareValues(e.Key[k], e.KeyEnd[k]) > 0 {
				return fakeErr(i, op, syscall.EINVAL, "interval field %d ends (%s) before it starts (%s)", k, renderValue(e.KeyEnd[k]), renderValue(e.Key[k]))
			}
		}
	}
	ne := canonicalElement(s, *e)
	id := fakeElemKey(ne)
	switch op.Verb {
	case VerbAdd:
		if err := fakeCheckElementData(i, op, ft, s, e); err != nil {
			return err
		}
		if e.Timeout < 0 || (e.Timeout > 0 && !s.HasTimeout && s.Timeout == 0) {
			return fakeErr(i, op, syscall.EINVAL, "set %s has no timeout flag: its elements cannot have a timeout", s.Name)
		}
		if old, ok := fs.elems[id]; ok {
			if fakeSameData(old, ne) {
				return nil // the kernel keeps the existing element as it is
			}
			return fakeErr(i, op, syscall.EEXIST, "set %s already has this key with another value: delete it first, in the same transaction", s.Name)
		}
		if s.Interval {
			if other, ok := fs.overlap(ne); ok {
				return fakeErr(i, op, syscall.EEXIST, "interval overlaps element { %s } of set %s", renderElement(other), s.Name)
			}
		}
		fs.insert(id, ne)
		ft.holdElement(ne)
		return nil
	case VerbDelete:
		old, ok := fs.elems[id]
		if !ok {
			return fakeErr(i, op, syscall.ENOENT, "set %s has no element with this key (an interval is deleted by its exact start and end)", s.Name)
		}
		fs.remove(id, old)
		ft.releaseElement(old)
		return nil
	}
	return fakeErr(i, op, syscall.EINVAL, "an element can only be added or deleted; flush its set instead")
}

// fakeCheckKey checks that a key (or key end) has the set's field types and valid values.
func fakeCheckKey(i int, op Op, s *Set, what string, key []Value) error {
	if len(key) != len(s.Key) {
		return fakeErr(i, op, syscall.EINVAL, "set %s has a %d-field key, the element's %s has %d fields", s.Name, len(s.Key), what, len(key))
	}
	for k, v := range key {
		if v.Type != s.Key[k] {
			return fakeErr(i, op, syscall.EINVAL, "set %s: %s field %d is %s, the set wants %s", s.Name, what, k, v.Type, s.Key[k])
		}
		if err := fakeCheckValue(v); err != "" {
			return fakeErr(i, op, syscall.EINVAL, "set %s: %s field %d: %s", s.Name, what, k, err)
		}
	}
	return nil
}

// fakeCheckValue returns what is wrong with v, or "".
func fakeCheckValue(v Value) string {
	switch v.Type {
	case TypeIPv4Addr:
		if !v.Addr.Is4() {
			return "an ipv4_addr value needs an IPv4 address, has " + v.Addr.String()
		}
	case TypeIPv6Addr:
		if !v.Addr.Is6() || v.Addr.Is4In6() {
			return "an ipv6_addr value needs an IPv6 address, has " + v.Addr.String()
		}
	case TypeInetProto:
		if v.Num > 255 {
			return "inet_proto is one byte"
		}
	case TypeInetService:
		if v.Num > 65535 {
			return "inet_service is two bytes"
		}
	case TypeMark, TypeInteger:
	default:
		return "a value of type " + v.Type.String() + " cannot be sent"
	}
	return ""
}

func fakeCheckElementData(i int, op Op, ft *fakeTable, s *Set, e *Element) error {
	switch {
	case s.IsVerdictMap():
		if e.Verdict == nil || e.Data != nil {
			return fakeErr(i, op, syscall.EINVAL, "verdict map %s needs a Verdict (and no Data) on each element", s.Name)
		}
		return fakeCheckVerdict(i, op, ft, *e.Verdict)
	case s.IsMap():
		if e.Verdict != nil || len(e.Data) != len(s.Data) {
			return fakeErr(i, op, syscall.EINVAL, "map %s needs %d data fields (%v) on each element", s.Name, len(s.Data), s.Data)
		}
		for k, v := range e.Data {
			if v.Type != s.Data[k] {
				return fakeErr(i, op, syscall.EINVAL, "map %s: data field %d is %s, the map wants %s", s.Name, k, v.Type, s.Data[k])
			}
			if err := fakeCheckValue(v); err != "" {
				return fakeErr(i, op, syscall.EINVAL, "map %s: data field %d: %s", s.Name, k, err)
			}
		}
	default:
		if e.Verdict != nil || e.Data != nil {
			return fakeErr(i, op, syscall.EINVAL, "%s is a set, not a map: its elements carry no data", s.Name)
		}
	}
	return nil
}

// fakeCheckVerdict checks a verdict of a rule or of a map element.
func fakeCheckVerdict(i int, op Op, ft *fakeTable, v Verdict) error {
	switch v.Kind {
	case VerdictAccept, VerdictDrop, VerdictReturn, VerdictContinue:
		if v.Chain != "" {
			return fakeErr(i, op, syscall.EINVAL, "verdict %s names a chain; only jump and goto do", renderVerdict(v))
		}
		return nil
	case VerdictJump, VerdictGoto:
		target := ft.chains[v.Chain]
		if target == nil {
			return fakeErr(i, op, syscall.ENOENT, "%s: chain %q does not exist: add it first", renderVerdict(v), v.Chain)
		}
		if target.chain.Base != nil {
			return fakeErr(i, op, syscall.EOPNOTSUPP, "%s: cannot jump to a base chain", renderVerdict(v))
		}
		return nil
	}
	return fakeErr(i, op, syscall.EINVAL, "unknown verdict kind %d", v.Kind)
}

func fakeSameData(a, b Element) bool {
	if (a.Verdict == nil) != (b.Verdict == nil) {
		return false
	}
	if a.Verdict != nil && *a.Verdict != *b.Verdict {
		return false
	}
	return slices.Equal(a.Data, b.Data)
}

// fakeElemKey identifies an element by key and interval end (canonical: no end when single).
func fakeElemKey(e Element) string {
	return renderKey(e.Key, nil) + "|" + renderKey(e.KeyEnd, nil)
}

func fakeEnd(e Element) []Value {
	if e.KeyEnd != nil {
		return e.KeyEnd
	}
	return e.Key
}

func (fs *fakeSet) insert(id string, e Element) {
	fs.elems[id] = e
	if !fs.set.Interval {
		return
	}
	if CompareValues(e.Key[0], fakeEnd(e)[0]) == 0 {
		if fs.byFirst == nil {
			fs.byFirst = map[Value]map[string]struct{}{}
		}
		if fs.byFirst[e.Key[0]] == nil {
			fs.byFirst[e.Key[0]] = map[string]struct{}{}
		}
		fs.byFirst[e.Key[0]][id] = struct{}{}
		return
	}
	if fs.wide == nil {
		fs.wide = map[string]struct{}{}
	}
	fs.wide[id] = struct{}{}
}

func (fs *fakeSet) remove(id string, e Element) {
	delete(fs.elems, id)
	if !fs.set.Interval {
		return
	}
	delete(fs.wide, id)
	if m := fs.byFirst[e.Key[0]]; m != nil {
		delete(m, id)
		if len(m) == 0 {
			delete(fs.byFirst, e.Key[0])
		}
	}
}

// overlap finds an element that the kernel would say ne overlaps. A one-field interval set
// (rbtree) refuses any intersection. A concatenation (pipapo) refuses an element whose start or
// end point lies inside an existing element; one that merely encloses another is accepted.
func (fs *fakeSet) overlap(ne Element) (Element, bool) {
	single := len(fs.set.Key) == 1
	start, end := ne.Key, fakeEnd(ne)
	hit := func(id string) bool {
		old := fs.elems[id]
		if single {
			return CompareValues(start[0], fakeEnd(old)[0]) <= 0 && CompareValues(old.Key[0], end[0]) <= 0
		}
		return fakeInside(start, old) || fakeInside(end, old)
	}
	var cands []map[string]struct{}
	if single || CompareValues(start[0], end[0]) != 0 {
		// A range in the first field can meet any element.
		for _, m := range fs.byFirst {
			cands = append(cands, m)
		}
	} else {
		cands = append(cands, fs.byFirst[start[0]])
	}
	cands = append(cands, fs.wide)
	for _, m := range cands {
		for id := range m {
			if hit(id) {
				return fs.elems[id], true
			}
		}
	}
	return Element{}, false
}

// fakeInside reports whether point p lies in element e, field by field.
func fakeInside(p []Value, e Element) bool {
	end := fakeEnd(e)
	for k := range p {
		if CompareValues(p[k], e.Key[k]) < 0 || CompareValues(p[k], end[k]) > 0 {
			return false
		}
	}
	return true
}
