package nft

import (
	"fmt"
	"slices"
	"syscall"
)

// fakeCheckRule checks each expression of a rule being added, as the kernel does when it parses
// the rule: references, types, and values.
func fakeCheckRule(i int, op Op, ft *fakeTable, r *Rule) error {
	fam := op.Table.Family
	bad := func(k int, format string, args ...any) error {
		return fakeErr(i, op, syscall.EINVAL, "expression %d: %s", k, fmt.Sprintf(format, args...))
	}
	set := func(k int, name string) (*Set, error) {
		fs := ft.sets[name]
		if fs == nil {
			return nil, fakeErr(i, op, syscall.ENOENT, "expression %d: set %q does not exist in table %s: add it before the rules that use it", k, name, op.Table)
		}
		return &fs.set, nil
	}
	fields := func(k int, fs []Field, s *Set) error {
		if len(fs) == 0 {
			return bad(k, "a lookup needs at least one field")
		}
		var types []Type
		for _, f := range fs {
			types = append(types, f.Type(fam))
		}
		if slices.Contains(types, TypeInvalid) {
			return bad(k, "unknown field in %v", fs)
		}
		if !slices.Equal(types, s.Key) {
			return bad(k, "fields of types %v do not fit the key %v of set %s", types, s.Key, s.Name)
		}
		return nil
	}
	for k, e := range r.Exprs {
		switch x := e.(type) {
		case Cmp:
			t := x.Field.Type(fam)
			if t == TypeInvalid {
				return bad(k, "unknown field %d", x.Field)
			}
			if x.Value.Type != t {
				return bad(k, "comparing a %s field with a %s value", t, x.Value.Type)
			}
			if msg := fakeCheckValue(x.Value); msg != "" {
				return bad(k, "%s", msg)
			}
		case CmpPrefix:
			if x.Field != FieldSaddr && x.Field != FieldDaddr {
				return bad(k, "a prefix match needs an address field")
			}
			if !x.Prefix.IsValid() || x.Prefix.Addr().Is4() != (fam == IPv4) {
				return bad(k, "prefix %s does not fit a %s table", x.Prefix, fam)
			}
		case CmpSet:
			s, err := set(k, x.Set)
			if err != nil {
				return err
			}
			if err := fields(k, x.Fields, s); err != nil {
				return err
			}
		case VMap:
			s, err := set(k, x.Map)
			if err != nil {
				return err
			}
			if !s.IsVerdictMap() {
				return bad(k, "vmap needs a verdict map; %s is not one", s.Name)
			}
			if err := fields(k, x.Fields, s); err != nil {
				return err
			}
		case DNAT:
			if !x.Addr.IsValid() || x.Addr.Unmap().Is4() != (fam == IPv4) {
				return bad(k, "dnat address %s does not fit a %s table", x.Addr, fam)
			}
		case DNATNumgen:
			if x.Modulus == 0 {
				return fakeErr(i, op, syscall.ERANGE, "expression %d: numgen modulus must be at least 1", k)
			}
			s, err := set(k, x.Map)
			if err != nil {
				return err
			}
			if !ValidNumgenKey(x.Key) {
				return bad(k, "dnat numgen key fields %v: use none, %v or %v", x.Key, DNATNumgenKeyAddr, DNATNumgenKeyPort)
			}
			want := []Type{fam.AddrType()}
			if x.WithPort {
				want = append(want, TypeInetService)
			}
			if len(x.Key) > 0 && s.Interval {
				return bad(k, "map %s: a numgen map with a key must not be an interval map", s.Name)
			}
			key := x.numgenMapKey(fam)
			if !slices.Equal(s.Key, key) || !slices.Equal(s.Data, want) {
				return bad(k, "map %s is %v : %v, dnat numgen needs %v : %v", s.Name, s.Key, s.Data, key, want)
			}
		case NumgenMatch:
			if x.Modulus == 0 {
				return fakeErr(i, op, syscall.ERANGE, "expression %d: numgen modulus must be at least 1", k)
			}
		case SetUpdate:
			s, err := set(k, x.Set)
			if err != nil {
				return err
			}
			// Linux 6.18 accepts an update of a set without the dynamic flag (nft sets it anyway).
			if x.Timeout > 0 && !s.HasTimeout && s.Timeout == 0 {
				return fakeErr(i, op, syscall.EOPNOTSUPP, "expression %d: set %s has no timeout flag: update cannot set a timeout", k, s.Name)
			}
			if err := fields(k, x.Fields, s); err != nil {
				return err
			}
			if err := fakeCheckUpdateData(k, x, s, fam, bad); err != nil {
				return err
			}
		case DNATMap:
			s, err := set(k, x.Map)
			if err != nil {
				return err
			}
			if !s.IsMap() || s.IsVerdictMap() {
				return bad(k, "dnat from a map needs a data map; %s is not one", s.Name)
			}
			if s.Interval {
				return bad(k, "map %s: dnat from a map needs a hash map, not an interval map", s.Name)
			}
			if err := fields(k, x.Fields, s); err != nil {
				return err
			}
			want := []Type{fam.AddrType()}
			if x.WithPort {
				want = append(want, TypeInetService)
			}
			if !slices.Equal(s.Data, want) {
				return bad(k, "map %s has data %v, dnat needs %v", s.Name, s.Data, want)
			}
			if x.WithPort && x.Port != 0 {
				return bad(k, "dnat from map %s: a port from the map and a constant port", s.Name)
			}
		case Verdict:
			if err := fakeCheckVerdict(i, op, ft, x); err != nil {
				return err
			}
		case SocketMatch:
			if x.Key != SocketTransparent && x.Key != SocketWildcard {
				return bad(k, "socket key %d: use SocketTransparent or SocketWildcard", x.Key)
			}
		case Redirect:
			if x.Port == 0 {
				return bad(k, "redirect needs a port")
			}
		case MarkTest, CtState, CtStatus, FibAddrType, MarkOr, MarkXor, Masquerade, Reject:
		case Unknown:
			return bad(k, "an Unknown expression (%s) is only read back, it cannot be sent", x.Description)
		default:
			return bad(k, "unknown expression type %T", e)
		}
	}
	return nil
}

// fakeValidateTable is the kernel's commit-time check of what the base chains reach: NAT and
// reject only where type and hook allow them, and jumps nested at most 15 deep (no loops). It
// returns an OpError with Index -1; the caller names the op.
func fakeValidateTable(t Table, ft *fakeTable) *OpError {
	v := &fakeValidator{ft: ft, height: map[string]int{}, state: map[string]int{}}
	names := make([]string, 0, len(ft.chains))
	for n, ch := range ft.chains {
		if ch.chain.Base != nil {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		base := ft.chains[n].chain.Base
		if h := v.heightOf(n); h >= fakeJumpStack {
			return &OpError{Index: -1, Object: "chain " + t.String() + " " + n, Err: syscall.EMLINK,
				Detail: fmt.Sprintf("base chain %s reaches chains %d or more jumps deep, or a loop (the kernel allows %d)", n, fakeJumpStack, fakeJumpStack-1)}
		}
		for _, c := range v.reachable(n) {
			for _, r := range ft.chains[c].rules {
				for _, e := range r.Exprs {
					if why := fakeHookAllows(base, e); why != "" {
						return &OpError{Index: -1, Object: "chain " + t.String() + " " + c, Err: syscall.EOPNOTSUPP,
							Detail: fmt.Sprintf("chain %s is reached from base chain %s (%s hook %s): %s", c, n, base.Type, base.Hook, why)}
					}
				}
			}
		}
	}
	return nil
}

// fakeJumpStack is the kernel's NFT_JUMP_STACK_SIZE.
const fakeJumpStack = 16

// fakeHookAllows returns why e may not run under base, or "".
func fakeHookAllows(base *BaseChain, e Expr) string {
	switch e.(type) {
	case DNAT, DNATNumgen, DNATMap:
		if base.Type != ChainTypeNAT || (base.Hook != HookPrerouting && base.Hook != HookOutput) {
			return "dnat needs a nat chain at prerouting or output"
		}
	case Redirect:
		if base.Type != ChainTypeNAT || (base.Hook != HookPrerouting && base.Hook != HookOutput) {
			return "redirect needs a nat chain at prerouting or output"
		}
	case SocketMatch:
		if base.Hook != HookPrerouting && base.Hook != HookInput && base.Hook != HookOutput {
			return "socket is allowed at prerouting, input and output only"
		}
	case Masquerade:
		if base.Type != ChainTypeNAT || base.Hook != HookPostrouting {
			return "masquerade needs a nat chain at postrouting"
		}
	case Reject:
		if base.Hook == HookPostrouting {
			return "reject is not allowed at postrouting"
		}
	}
	return ""
}

type fakeValidator struct {
	ft     *fakeTable
	height map[string]int
	state  map[string]int // 1 visiting, 2 done
}

// edges lists the chains a chain's rules may jump or go to, including through verdict maps (the
// kernel counts every lookup in a verdict map, even one without a vmap, as reaching its chains).
func (v *fakeValidator) edges(name string) []string {
	var out []string
	for _, r := range v.ft.chains[name].rules {
		for _, e := range r.Exprs {
			var m string
			switch x := e.(type) {
			case Verdict:
				if x.Kind == VerdictJump || x.Kind == VerdictGoto {
					out = append(out, x.Chain)
				}
			case VMap:
				m = x.Map
			case CmpSet:
				m = x.Set
			}
			if fs := v.ft.sets[m]; m != "" && fs != nil && fs.set.IsVerdictMap() {
				for _, el := range fs.elems {
					if el.Verdict != nil && (el.Verdict.Kind == VerdictJump || el.Verdict.Kind == VerdictGoto) {
						out = append(out, el.Verdict.Chain)
					}
				}
			}
		}
	}
	return out
}

// heightOf is the longest jump path from a chain, capped at fakeJumpStack (a loop counts as
// infinitely deep).
func (v *fakeValidator) heightOf(name string) int {
	switch v.state[name] {
	case 1:
		return fakeJumpStack
	case 2:
		return v.height[name]
	}
	v.state[name] = 1
	h := 0
	for _, next := range v.edges(name) {
		if v.ft.chains[next] == nil {
			continue
		}
		if d := v.heightOf(next) + 1; d > h {
			h = min(d, fakeJumpStack)
		}
	}
	v.state[name], v.height[name] = 2, h
	return h
}

func (v *fakeValidator) reachable(from string) []string {
	seen := map[string]bool{from: true}
	queue := []string{from}
	for k := 0; k < len(queue); k++ {
		for _, next := range v.edges(queue[k]) {
			if !seen[next] && v.ft.chains[next] != nil {
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	return queue
}

// fakeCheckUpdateData is the kernel's check of an update's data: a data map takes data (and a
// plain set none), of the map's types, and key and data must fit the 16 register words.
func fakeCheckUpdateData(k int, x SetUpdate, s *Set, fam Family, bad func(int, string, ...any) error) error {
	if len(x.DataFields) > 0 {
		return fakeCheckUpdateDataFields(k, x, s, fam, bad)
	}
	if len(x.Data) == 0 {
		if s.IsMap() {
			return bad(k, "update of map %s needs data", s.Name)
		}
		return nil
	}
	if !s.IsMap() || s.IsVerdictMap() {
		return bad(k, "update with data needs a data map; %s is not one", s.Name)
	}
	if len(x.Data) != len(s.Data) {
		return bad(k, "update of map %s: %d data fields, the map has %d", s.Name, len(x.Data), len(s.Data))
	}
	words := 0
	for _, f := range x.Fields {
		words += fakeTypeLen(f.Type(fam)) / 4
	}
	words = (words + 3) / 4 * 4
	for j, v := range x.Data {
		if v.Type != s.Data[j] {
			return bad(k, "update of map %s: data field %d is %s, the map wants %s", s.Name, j, v.Type, s.Data[j])
		}
		if msg := fakeCheckValue(v); msg != "" {
			return bad(k, "%s", msg)
		}
		words += fakeTypeLen(v.Type) / 4
	}
	if words > 16 {
		return bad(k, "update of map %s: key and data take %d register words, the kernel has 16", s.Name, words)
	}
	return nil
}

// fakeCheckUpdateDataFields is fakeCheckUpdateData for data read from the packet: fields of the
// map's data types, key and data within the 16 register words.
func fakeCheckUpdateDataFields(k int, x SetUpdate, s *Set, fam Family, bad func(int, string, ...any) error) error {
	if len(x.Data) > 0 {
		return bad(k, "update of map %s: constant data and data fields together", s.Name)
	}
	if !s.IsMap() || s.IsVerdictMap() {
		return bad(k, "update with data needs a data map; %s is not one", s.Name)
	}
	if len(x.DataFields) != len(s.Data) {
		return bad(k, "update of map %s: %d data fields, the map has %d", s.Name, len(x.DataFields), len(s.Data))
	}
	words := 0
	for _, f := range x.Fields {
		words += fakeTypeLen(f.Type(fam)) / 4
	}
	words = (words + 3) / 4 * 4
	for j, f := range x.DataFields {
		t := f.Type(fam)
		if t == TypeInvalid {
			return bad(k, "unknown data field %d", f)
		}
		if t != s.Data[j] {
			return bad(k, "update of map %s: data field %d is %s, the map wants %s", s.Name, j, t, s.Data[j])
		}
		words += fakeTypeLen(t) / 4
	}
	if words > 16 {
		return bad(k, "update of map %s: key and data take %d register words, the kernel has 16", s.Name, words)
	}
	return nil
}

// numgenMapKey is the key type a DNATNumgen's map must have in a table of family f.
func (d DNATNumgen) numgenMapKey(f Family) []Type {
	out := make([]Type, 0, len(d.Key)+1)
	for _, fl := range d.Key {
		out = append(out, fl.Type(f))
	}
	return append(out, TypeInteger)
}
