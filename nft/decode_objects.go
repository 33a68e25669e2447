package nft

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// This file reads a table back: whole-table dumps of chains, sets, each set's elements and all
// rules, decoded into the model straight from the kernel's attributes and nft's userdata.

func decodeTableAttr(t Table) func(w *nlBuf) {
	return func(w *nlBuf) { w.str(unix.NFTA_TABLE_NAME, t.Name) }
}

// Dump reads back everything table t holds.
func (k *Kernel) Dump(ctx context.Context, t Table) (*Ruleset, error) { return k.dump(ctx, t, nil) }

// DumpPacked reads back everything table t holds but its elements, which it hands to each,
// packed, as they are decoded (each set's in the kernel's order; two sets' may come
// interleaved, see dumpContents): a reader that keeps elements packed keeps only those it
// wants, and a large table's elements are never held unpacked nor whole. each
// is called on the caller's goroutine, never twice at once.
func (k *Kernel) DumpPacked(ctx context.Context, t Table, each func(Packed)) (*Ruleset, error) {
	return k.dump(ctx, t, each)
}

func (k *Kernel) dump(ctx context.Context, t Table, each func(Packed)) (*Ruleset, error) {
	err := k.conn.get(ctx, unix.NFT_MSG_GETTABLE, t.Family, decodeTableAttr(t), func(nlMsg) error { return nil })
	if err != nil {
		return nil, fmt.Errorf("dump table %s: %w", t, err)
	}
	rs := &Ruleset{Table: t, Elements: map[string][]Element{}}
	if rs.Chains, err = k.dumpChains(ctx, t); err != nil {
		return nil, fmt.Errorf("dump table %s: chains: %w", t, err)
	}
	if rs.Sets, err = k.dumpSets(ctx, t); err != nil {
		return nil, fmt.Errorf("dump table %s: sets: %w", t, err)
	}
	k.sets[t] = make(map[string]Set, len(rs.Sets))
	for _, s := range rs.Sets {
		k.sets[t][s.Name] = s
	}
	if each != nil {
		rs.Elements = nil
	}
	if err := k.dumpContents(ctx, t, rs, each); err != nil {
		return nil, fmt.Errorf("dump table %s: %w", t, err)
	}
	return rs, nil
}

func (k *Kernel) dumpChains(ctx context.Context, t Table) ([]Chain, error) {
	var out []Chain
	err := k.conn.dump(ctx, unix.NFT_MSG_GETCHAIN, t.Family, nil, func(m nlMsg) error {
		if len(m.data) < nlNfgenLen || Family(m.data[0]) != t.Family {
			return nil
		}
		a := nlAttrMap(m.data[nlNfgenLen:])
		if nlStr(a[unix.NFTA_CHAIN_TABLE]) != t.Name {
			return nil
		}
		c := Chain{Name: nlStr(a[unix.NFTA_CHAIN_NAME])}
		if h, ok := a[unix.NFTA_CHAIN_HOOK]; ok {
			ha := nlAttrMap(h)
			c.Base = &BaseChain{
				Type:     ChainType(nlStr(a[unix.NFTA_CHAIN_TYPE])),
				Hook:     codecHookName(nlU32(ha[unix.NFTA_HOOK_HOOKNUM])),
				Priority: int32(nlU32(ha[unix.NFTA_HOOK_PRIORITY])),
				Policy:   PolicyAccept,
			}
			if p, ok := a[unix.NFTA_CHAIN_POLICY]; ok && nlU32(p) == codecVerdictDropCode {
				c.Base.Policy = PolicyDrop
			}
		}
		out = append(out, c)
		return nil
	})
	return out, err
}

// decodeTypes splits a combined datatype id into n fields; n <= 0 counts the non-zero 6-bit groups
// (every datatype id the model uses is non-zero).
func decodeTypes(id uint32, n int) []Type {
	if id == unix.NFT_DATA_VERDICT {
		return []Type{TypeVerdict}
	}
	if n <= 0 {
		for v := id; v != 0; v >>= codecConcatBits {
			n++
		}
	}
	return codecTypesFromID(id, n)
}

// decodeUdata returns the TLVs of nft's userdata (1-byte type, 1-byte length).
func decodeUdata(b []byte) map[byte][]byte {
	m := map[byte][]byte{}
	for len(b) >= 2 {
		t, n := b[0], int(b[1])
		if 2+n > len(b) {
			break
		}
		m[t] = b[2 : 2+n]
		b = b[2+n:]
	}
	return m
}

func decodeUdataString(b []byte) string { return nlStr(b) }

// decodeUdataFind returns the value of the first userdata TLV of type typ, without building a map.
func decodeUdataFind(b []byte, typ byte) []byte {
	for len(b) >= 2 {
		t, n := b[0], int(b[1])
		if 2+n > len(b) {
			break
		}
		if t == typ {
			return b[2 : 2+n]
		}
		b = b[2+n:]
	}
	return nil
}

func (k *Kernel) dumpSets(ctx context.Context, t Table) ([]Set, error) {
	var out []Set
	err := k.conn.dump(ctx, unix.NFT_MSG_GETSET, t.Family, func(w *nlBuf) { w.str(unix.NFTA_SET_TABLE, t.Name) }, func(m nlMsg) error {
		if len(m.data) < nlNfgenLen {
			return nil
		}
		a := nlAttrMap(m.data[nlNfgenLen:])
		if nlStr(a[unix.NFTA_SET_TABLE]) != t.Name {
			return nil
		}
		flags := nlU32(a[unix.NFTA_SET_FLAGS])
		if flags&unix.NFT_SET_ANONYMOUS != 0 {
			return nil // anonymous sets belong to their rule
		}
		nKey, size := 0, uint32(0)
		if d, ok := a[unix.NFTA_SET_DESC]; ok {
			da := nlAttrMap(d)
			if c, ok := da[codecSetDescConcat]; ok {
				nKey = len(nlParseAttrs(c))
			}
			if sz, ok := da[unix.NFTA_SET_DESC_SIZE]; ok {
				size = nlU32(sz)
			}
		}
		s := Set{
			Name:     nlStr(a[unix.NFTA_SET_NAME]),
			Key:      decodeTypes(nlU32(a[unix.NFTA_SET_KEY_TYPE]), nKey),
			Interval: flags&unix.NFT_SET_INTERVAL != 0,
			Dynamic:  flags&unix.NFT_SET_EVAL != 0,
			Size:     size,
		}
		if dt, ok := a[unix.NFTA_SET_DATA_TYPE]; ok && flags&unix.NFT_SET_MAP != 0 {
			s.Data = decodeTypes(nlU32(dt), 0)
		}
		if to, ok := a[unix.NFTA_SET_TIMEOUT]; ok {
			s.Timeout = time.Duration(nlU64(to)) * time.Millisecond
		}
		s.HasTimeout = flags&unix.NFT_SET_TIMEOUT != 0 && s.Timeout == 0
		if ud, ok := a[unix.NFTA_SET_USERDATA]; ok {
			u := decodeUdata(ud)
			s.Comment = decodeUdataString(u[codecUdataSetComment])
			s.NumgenKey = decodeNumgenTypeof(u[typeofUdataKey])
		}
		out = append(out, s)
		return nil
	})
	return out, err
}

func decodeVerdictCode(code int32, chain string) (Verdict, error) {
	switch code {
	case codecVerdictAcceptCode:
		return Verdict{Kind: VerdictAccept}, nil
	case codecVerdictDropCode:
		return Verdict{Kind: VerdictDrop}, nil
	case unix.NFT_RETURN:
		return Verdict{Kind: VerdictReturn}, nil
	case unix.NFT_CONTINUE:
		return Verdict{Kind: VerdictContinue}, nil
	case unix.NFT_JUMP:
		return Verdict{Kind: VerdictJump, Chain: chain}, nil
	case unix.NFT_GOTO:
		return Verdict{Kind: VerdictGoto, Chain: chain}, nil
	}
	return Verdict{}, fmt.Errorf("unknown verdict code %d", code)
}

func (k *Kernel) dumpRules(ctx context.Context, c *nlConn, t Table, rs *Ruleset) ([]Rule, error) {
	sets := map[string]*Set{}
	for i := range rs.Sets {
		sets[rs.Sets[i].Name] = &rs.Sets[i]
	}
	var out []Rule
	chains := map[string]string{} // each rule's chain name, shared by the rules of a chain
	err := c.dump(ctx, unix.NFT_MSG_GETRULE, t.Family, func(w *nlBuf) { w.str(unix.NFTA_RULE_TABLE, t.Name) }, func(m nlMsg) error {
		if len(m.data) < nlNfgenLen {
			return nil
		}
		var table, chain, exprs []byte
		r := Rule{}
		for a := nlIter(m.data[nlNfgenLen:]); a.next(); {
			switch a.typ {
			case unix.NFTA_RULE_TABLE:
				table = a.data
			case unix.NFTA_RULE_CHAIN:
				chain = a.data
			case unix.NFTA_RULE_HANDLE:
				r.Handle = nlU64(a.data)
			case unix.NFTA_RULE_USERDATA:
				r.Comment = decodeUdataString(decodeUdataFind(a.data, codecUdataRuleComment))
			case unix.NFTA_RULE_EXPRESSIONS:
				exprs = a.data
			}
		}
		if string(nlCut(table)) != t.Name {
			return nil
		}
		if r.Chain = chains[string(nlCut(chain))]; r.Chain == "" {
			r.Chain = nlStr(chain)
			chains[r.Chain] = r.Chain
		}
		r.Exprs = decodeRuleExprs(t.Family, exprs, sets)
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	order := map[string]int{}
	for i, c := range rs.Chains {
		order[c.Name] = i
	}
	slices.SortStableFunc(out, func(a, b Rule) int { return cmp.Compare(order[a.Chain], order[b.Chain]) })
	return out, nil
}

func decodeU32Host(b []byte) (uint32, bool) {
	if len(b) != 4 {
		return 0, false
	}
	return binary.NativeEndian.Uint32(b), true
}
