package nft

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// This file encodes each Op of a Transaction into nf_tables netlink messages, all appended to one
// batch buffer. See kernel.go for how the batch is sent and its errors mapped back to ops.

// Kernel attribute numbers and flags that golang.org/x/sys/unix does not name.
const (
	codecSetFlagConcat      = 0x80 // NFT_SET_CONCAT
	codecSetDescConcat      = 2    // NFTA_SET_DESC_CONCAT
	codecSetFieldLen        = 1    // NFTA_SET_FIELD_LEN
	codecSetElemKeyEnd      = 10   // NFTA_SET_ELEM_KEY_END
	codecElemIntervalEnd    = 1    // NFT_SET_ELEM_INTERVAL_END
	codecUdataSetKeyOrder   = 0    // NFTNL_UDATA_SET_KEYBYTEORDER
	codecUdataSetDataOrder  = 1    // NFTNL_UDATA_SET_DATABYTEORDER
	codecUdataSetComment    = 7    // NFTNL_UDATA_SET_COMMENT
	codecUdataElemComment   = 0    // NFTNL_UDATA_SET_ELEM_COMMENT
	codecUdataRuleComment   = 0    // NFTNL_UDATA_RULE_COMMENT
	codecElemChunkBytes     = 32 << 10
	codecMsgTypeNFT         = unix.NFNL_SUBSYS_NFTABLES << 8
	codecFlagsCreate        = unix.NLM_F_REQUEST | unix.NLM_F_CREATE
	codecFlagsCreateAppend  = unix.NLM_F_REQUEST | unix.NLM_F_CREATE | unix.NLM_F_APPEND
	codecFlagsRequest       = unix.NLM_F_REQUEST
	codecVerdictAcceptCode  = 1 // NF_ACCEPT (chain policy)
	codecVerdictDropCode    = 0 // NF_DROP
	codecUdataMaxValueBytes = 255
)

// codecSetInfo is what encoding elements (and lookups) needs to know about a set.
type codecSetInfo struct {
	set Set
	id  uint32 // NFTA_SET_ID if the set is created in this batch
	// modulus of the numgen expression filling an integer key, for the "typeof" userdata
	modulus uint32
}

func (s *codecSetInfo) singleInterval() bool { return s.set.Interval && len(s.set.Key) == 1 }

// codecMsg records which op a message of the batch starts with and where it is, so that an
// error reply (by sequence number, and for element lists by attribute offset, see elementOp)
// names the op the kernel refused.
type codecMsg struct {
	op  int   // first op of the message
	off int32 // the message's offset in the batch
}

// codecBatch is one transaction being encoded.
type codecBatch struct {
	w     nlBuf
	fam   Family
	table string
	seq0  uint32 // sequence number of BATCH_BEGIN; message i of msgs has seq0+1+i
	msgs  []codecMsg
	sets  func(name string) (*codecSetInfo, error)
	// measure makes the batch only measure itself: each message is dropped from w once the next
	// one begins, its length added to measured (see Kernel.encode).
	measure  bool
	measured int
	// the set the last element named, in the current table (consecutive elements share a set)
	lastSet     string
	lastSetInfo *codecSetInfo
	// reused buffers for an element's key, key end, data and interval end
	key, keyEnd, data, next []byte
	// open element message, extended while consecutive element ops target the same set and verb
	elemMsg, elemNest int
	elemSet           string
	elemVerb          Verb
	// scratch holds a packed element's op unpacked while it is encoded
	scratch elementScratch
}

func (b *codecBatch) begin(typ uint16, flags uint16, op int) int {
	b.closeElems()
	if b.measure {
		b.measured += len(b.w.b)
		b.w.b = b.w.b[:0]
	}
	seq := b.seq0 + 1 + uint32(len(b.msgs))
	b.msgs = append(b.msgs, codecMsg{op: op, off: int32(len(b.w.b))})
	return b.w.beginMsg(codecMsgTypeNFT|typ, flags, seq, uint8(b.fam), 0)
}

// size is the length of the batch encoded so far, the dropped messages of a measuring batch
// included.
func (b *codecBatch) size() int { return b.measured + len(b.w.b) }

// closeElems ends an open element-list message.
func (b *codecBatch) closeElems() {
	if b.elemSet == "" {
		return
	}
	b.w.endNest(b.elemNest)
	b.w.endMsg(b.elemMsg)
	b.elemSet = ""
}

func codecUdataString(b []byte, typ byte, s string) []byte {
	return append(append(append(b, typ, byte(len(s)+1)), s...), 0)
}

// codecSetByName is b.sets with a one-entry cache: a full sync adds its elements set by set.
func (b *codecBatch) codecSetByName(name string) (*codecSetInfo, error) {
	if b.lastSetInfo != nil && name == b.lastSet {
		return b.lastSetInfo, nil
	}
	info, err := b.sets(name)
	if err != nil {
		return nil, err
	}
	b.lastSet, b.lastSetInfo = name, info
	return info, nil
}

// switchTable makes the following ops act on table t.
func (b *codecBatch) switchTable(t Table) {
	if t.Family != b.fam || t.Name != b.table {
		b.closeElems()
		b.fam, b.table = t.Family, t.Name
		b.lastSetInfo = nil
	}
}

func codecUdataU32(b []byte, typ byte, v uint32) []byte {
	return binary.NativeEndian.AppendUint32(append(b, typ, 4), v)
}

// codecHook returns the netfilter hook number of h.
func codecHook(h Hook) (uint32, bool) {
	switch h {
	case HookPrerouting:
		return unix.NF_INET_PRE_ROUTING, true
	case HookInput:
		return unix.NF_INET_LOCAL_IN, true
	case HookForward:
		return unix.NF_INET_FORWARD, true
	case HookOutput:
		return unix.NF_INET_LOCAL_OUT, true
	case HookPostrouting:
		return unix.NF_INET_POST_ROUTING, true
	}
	return 0, false
}

// codecHookName is the inverse of codecHook.
func codecHookName(n uint32) Hook {
	for _, h := range []Hook{HookPrerouting, HookInput, HookForward, HookOutput, HookPostrouting} {
		if v, _ := codecHook(h); v == n {
			return h
		}
	}
	return Hook(fmt.Sprintf("hook(%d)", n))
}

// addOp encodes op i. Errors found before sending are returned as *OpError for op i.
func (b *codecBatch) addOp(i int, op Op, rc *codecRuleCtx) error {
	if _, ok := op.Object.(*Packed); ok {
		op.Object = b.scratch.of(op.Object)
	}
	if err := checkOpStrings(op); err != nil {
		return err
	}
	w := &b.w
	switch o := op.Object.(type) {
	case *TableObj:
		var m int
		switch op.Verb {
		case VerbAdd:
			m = b.begin(unix.NFT_MSG_NEWTABLE, codecFlagsCreate, i)
		case VerbDelete:
			m = b.begin(unix.NFT_MSG_DELTABLE, codecFlagsRequest, i)
		default:
			return fmt.Errorf("%v of a table is not supported: flush its chains and sets instead", op.Verb)
		}
		w.str(unix.NFTA_TABLE_NAME, b.table)
		w.endMsg(m)
	case *Chain:
		var m int
		switch op.Verb {
		case VerbAdd:
			m = b.begin(unix.NFT_MSG_NEWCHAIN, codecFlagsCreate, i)
		case VerbDelete:
			m = b.begin(unix.NFT_MSG_DELCHAIN, codecFlagsRequest, i)
		case VerbFlush:
			m = b.begin(unix.NFT_MSG_DELRULE, codecFlagsRequest, i)
			w.str(unix.NFTA_RULE_TABLE, b.table)
			w.str(unix.NFTA_RULE_CHAIN, o.Name)
			w.endMsg(m)
			return nil
		}
		w.str(unix.NFTA_CHAIN_TABLE, b.table)
		w.str(unix.NFTA_CHAIN_NAME, o.Name)
		if op.Verb == VerbAdd && o.Base != nil {
			if err := b.baseChain(o.Base); err != nil {
				return err
			}
		}
		w.endMsg(m)
	case *Rule:
		return b.rule(i, op.Verb, o, rc)
	case *Set:
		return b.set(i, op.Verb, o)
	case *Element:
		return b.element(i, op.Verb, o)
	default:
		return fmt.Errorf("unsupported object %T", op.Object)
	}
	return nil
}

func (b *codecBatch) baseChain(bc *BaseChain) error {
	w := &b.w
	hook, ok := codecHook(bc.Hook)
	if !ok {
		return fmt.Errorf("unknown hook %q", bc.Hook)
	}
	if bc.Type != ChainTypeFilter && bc.Type != ChainTypeNAT {
		return fmt.Errorf("unknown chain type %q", bc.Type)
	}
	n := w.nest(unix.NFTA_CHAIN_HOOK)
	w.u32(unix.NFTA_HOOK_HOOKNUM, hook)
	w.u32(unix.NFTA_HOOK_PRIORITY, uint32(bc.Priority))
	w.endNest(n)
	// Like nft, send a policy only when one is given: the kernel refuses a policy on an
	// existing regular chain with EOPNOTSUPP before it can say EEXIST.
	switch bc.Policy {
	case "":
	case PolicyAccept:
		w.u32(unix.NFTA_CHAIN_POLICY, codecVerdictAcceptCode)
	case PolicyDrop:
		w.u32(unix.NFTA_CHAIN_POLICY, codecVerdictDropCode)
	default:
		return fmt.Errorf("unknown policy %q", bc.Policy)
	}
	w.str(unix.NFTA_CHAIN_TYPE, string(bc.Type))
	return nil
}

func (b *codecBatch) rule(i int, verb Verb, r *Rule, rc *codecRuleCtx) error {
	w := &b.w
	switch verb {
	case VerbAdd:
		if r.Handle != 0 {
			return fmt.Errorf("a rule to add must not carry a handle (%d): rules are appended", r.Handle)
		}
		m := b.begin(unix.NFT_MSG_NEWRULE, codecFlagsCreateAppend, i)
		w.str(unix.NFTA_RULE_TABLE, b.table)
		w.str(unix.NFTA_RULE_CHAIN, r.Chain)
		if err := rc.codecRuleExprs(w, r); err != nil {
			return err
		}
		if r.Comment != "" {
			u := w.open(unix.NFTA_RULE_USERDATA)
			w.b = codecUdataString(w.b, codecUdataRuleComment, r.Comment)
			w.close(u)
		}
		w.endMsg(m)
	case VerbDelete:
		if r.Handle == 0 {
			return fmt.Errorf("delete rule needs the handle of a rule read back by Dump")
		}
		m := b.begin(unix.NFT_MSG_DELRULE, codecFlagsRequest, i)
		w.str(unix.NFTA_RULE_TABLE, b.table)
		w.str(unix.NFTA_RULE_CHAIN, r.Chain)
		w.u64(unix.NFTA_RULE_HANDLE, r.Handle)
		w.endMsg(m)
	default:
		return fmt.Errorf("%v of a rule is not supported", verb)
	}
	return nil
}

func (b *codecBatch) set(i int, verb Verb, s *Set) error {
	w := &b.w
	switch verb {
	case VerbDelete:
		m := b.begin(unix.NFT_MSG_DELSET, codecFlagsRequest, i)
		w.str(unix.NFTA_SET_TABLE, b.table)
		w.str(unix.NFTA_SET_NAME, s.Name)
		w.endMsg(m)
		return nil
	case VerbFlush:
		m := b.begin(unix.NFT_MSG_DELSETELEM, codecFlagsRequest, i)
		w.str(unix.NFTA_SET_ELEM_LIST_TABLE, b.table)
		w.str(unix.NFTA_SET_ELEM_LIST_SET, s.Name)
		w.endMsg(m)
		return nil
	}
	info, err := b.sets(s.Name)
	if err != nil {
		return err
	}
	keyID, err := codecTypesID(s.Key)
	if err != nil {
		return fmt.Errorf("key: %w", err)
	}
	keyLen, _ := codecTypesLen(s.Key)
	if keyLen == 0 || keyLen > 64 {
		return fmt.Errorf("key %v: length %d is outside 1..64 bytes", s.Key, keyLen)
	}
	flags := uint32(0)
	if s.IsMap() {
		flags |= unix.NFT_SET_MAP
	}
	if s.Interval {
		flags |= unix.NFT_SET_INTERVAL
		if len(s.Key) > 1 {
			flags |= codecSetFlagConcat
		}
	}
	if s.Timeout > 0 || s.HasTimeout {
		flags |= unix.NFT_SET_TIMEOUT
	}
	if s.Dynamic {
		flags |= unix.NFT_SET_EVAL
	}
	m := b.begin(unix.NFT_MSG_NEWSET, codecFlagsCreate, i)
	w.str(unix.NFTA_SET_TABLE, b.table)
	w.str(unix.NFTA_SET_NAME, s.Name)
	w.u32(unix.NFTA_SET_FLAGS, flags)
	w.u32(unix.NFTA_SET_KEY_TYPE, keyID)
	w.u32(unix.NFTA_SET_KEY_LEN, uint32(keyLen))
	if s.IsVerdictMap() {
		w.u32(unix.NFTA_SET_DATA_TYPE, unix.NFT_DATA_VERDICT)
	} else if s.IsMap() {
		dataID, err := codecTypesID(s.Data)
		if err != nil {
			return fmt.Errorf("data: %w", err)
		}
		dataLen, _ := codecTypesLen(s.Data)
		w.u32(unix.NFTA_SET_DATA_TYPE, dataID)
		w.u32(unix.NFTA_SET_DATA_LEN, uint32(dataLen))
	}
	if s.Timeout > 0 {
		w.u64(unix.NFTA_SET_TIMEOUT, uint64(s.Timeout.Milliseconds()))
	}
	w.u32(unix.NFTA_SET_ID, info.id)
	if concat := len(s.Key) > 1 && s.Interval; concat || s.Size > 0 {
		d := w.nest(unix.NFTA_SET_DESC)
		if s.Size > 0 {
			w.u32(unix.NFTA_SET_DESC_SIZE, s.Size)
		}
		if !concat {
			w.endNest(d)
			w.attr(unix.NFTA_SET_USERDATA, codecSetUdata(s, info.modulus))
			w.endMsg(m)
			return nil
		}
		// Per-field lengths, which pipapo needs; the kernel refuses them without NFT_SET_CONCAT.
		c := w.nest(codecSetDescConcat)
		for _, t := range s.Key {
			ti, _ := codecType(t)
			e := w.nest(unix.NFTA_LIST_ELEM)
			w.u32(codecSetFieldLen, uint32(ti.len))
			w.endNest(e)
		}
		w.endNest(c)
		w.endNest(d)
	}
	w.attr(unix.NFTA_SET_USERDATA, codecSetUdata(s, info.modulus))
	w.endMsg(m)
	return nil
}

// codecSetUdata is the userdata nft writes for set s: key byte order, then for a typeof-keyed
// set (mod: its numgen modulus) the typeof descriptions, else for a map its data byte order;
// then the comment.
func codecSetUdata(s *Set, mod uint32) []byte {
	udata := codecUdataU32(nil, codecUdataSetKeyOrder, codecKeyByteOrder(s.Key, s.Interval))
	if codecTypeofKeyed(s) {
		udata = codecTypeofUdata(udata, s, mod)
	} else if s.IsMap() && !s.IsVerdictMap() {
		udata = codecUdataU32(udata, codecUdataSetDataOrder, codecKeyByteOrder(s.Data, false))
	}
	if s.Comment != "" {
		udata = codecUdataString(udata, codecUdataSetComment, s.Comment)
	}
	return udata
}

// element appends one element to the open element-list message for its set and verb, starting a
// new message when the set or verb changes or the list reaches codecElemChunkBytes, so every
// nested attribute stays far below the 64 KiB its uint16 length can express. Keys and data are
// encoded into reused buffers and copied once into the batch: an element allocates nothing.
func (b *codecBatch) element(i int, verb Verb, e *Element) error {
	if verb != VerbAdd && verb != VerbDelete {
		return fmt.Errorf("%v of an element is not supported", verb)
	}
	info, err := b.codecSetByName(e.Set)
	if err != nil {
		return err
	}
	s := &info.set
	bigHost := codecHostToBig(s.Interval)
	if b.key, err = codecEncodeKey(b.key[:0], e.Key, s.Key, bigHost); err != nil {
		return fmt.Errorf("key: %w", err)
	}
	key := b.key
	var keyEnd []byte
	if e.KeyEnd != nil {
		if !s.Interval {
			return fmt.Errorf("element has a KeyEnd but set %s has no interval flag", s.Name)
		}
		if b.keyEnd, err = codecEncodeKey(b.keyEnd[:0], e.KeyEnd, s.Key, bigHost); err != nil {
			return fmt.Errorf("key end: %w", err)
		}
		keyEnd = b.keyEnd
	} else if s.Interval {
		keyEnd = key
	}
	var data []byte
	if verb == VerbAdd {
		switch {
		case s.IsVerdictMap():
			if e.Verdict == nil {
				return fmt.Errorf("element of verdict map %s needs a Verdict", s.Name)
			}
			if _, err := codecVerdictKind(*e.Verdict); err != nil {
				return err
			}
		case s.IsMap():
			if b.data, err = codecEncodeKey(b.data[:0], e.Data, s.Data, false); err != nil {
				return fmt.Errorf("data: %w", err)
			}
			data = b.data
		case e.Verdict != nil || e.Data != nil:
			return fmt.Errorf("set %s is not a map: its elements carry no data", s.Name)
		}
	}
	if b.elemSet != e.Set || b.elemVerb != verb || len(b.w.b)-b.elemNest > codecElemChunkBytes {
		b.closeElems()
		typ := uint16(unix.NFT_MSG_NEWSETELEM)
		flags := uint16(codecFlagsCreate)
		if verb == VerbDelete {
			typ, flags = unix.NFT_MSG_DELSETELEM, codecFlagsRequest
		}
		b.elemMsg = b.begin(typ, flags, i)
		b.w.str(unix.NFTA_SET_ELEM_LIST_TABLE, b.table)
		b.w.str(unix.NFTA_SET_ELEM_LIST_SET, e.Set)
		if info.id != 0 {
			b.w.u32(unix.NFTA_SET_ELEM_LIST_SET_ID, info.id)
		}
		b.elemNest = b.w.nest(unix.NFTA_SET_ELEM_LIST_ELEMENTS)
		b.elemSet, b.elemVerb = e.Set, verb
	}
	if info.singleInterval() {
		// nft's encoding of a single-field range: a start element, and an end element flagged
		// INTERVAL_END at the first key after the range (none if the range reaches the top).
		b.elemAttr(key, nil, 0, data, e, verb)
		var ok bool
		if b.next, ok = codecIncrement(b.next[:0], keyEnd); ok {
			b.elemAttr(b.next, nil, codecElemIntervalEnd, nil, nil, verb)
		}
		return nil
	}
	b.elemAttr(key, keyEnd, 0, data, e, verb)
	return nil
}

func (b *codecBatch) elemAttr(key, keyEnd []byte, flags uint32, data []byte, e *Element, verb Verb) {
	w := &b.w
	n := w.nest(unix.NFTA_LIST_ELEM)
	k := w.nest(unix.NFTA_SET_ELEM_KEY)
	w.attr(unix.NFTA_DATA_VALUE, key)
	w.endNest(k)
	if keyEnd != nil {
		k := w.nest(codecSetElemKeyEnd)
		w.attr(unix.NFTA_DATA_VALUE, keyEnd)
		w.endNest(k)
	}
	if flags != 0 {
		w.u32(unix.NFTA_SET_ELEM_FLAGS, flags)
	}
	if verb == VerbAdd && e != nil {
		if e.Timeout > 0 {
			w.u64(unix.NFTA_SET_ELEM_TIMEOUT, uint64(e.Timeout.Milliseconds()))
		}
		if e.Verdict != nil {
			d := w.nest(unix.NFTA_SET_ELEM_DATA)
			v := w.nest(unix.NFTA_DATA_VERDICT)
			kind, _ := codecVerdictKind(*e.Verdict)
			w.u32(unix.NFTA_VERDICT_CODE, uint32(int32(kind)))
			if e.Verdict.Chain != "" {
				w.str(unix.NFTA_VERDICT_CHAIN, e.Verdict.Chain)
			}
			w.endNest(v)
			w.endNest(d)
		} else if data != nil {
			d := w.nest(unix.NFTA_SET_ELEM_DATA)
			w.attr(unix.NFTA_DATA_VALUE, data)
			w.endNest(d)
		}
		if e.Comment != "" {
			u := w.open(unix.NFTA_SET_ELEM_USERDATA)
			w.b = codecUdataString(w.b, codecUdataElemComment, e.Comment)
			w.close(u)
		}
	}
	w.endNest(n)
}

// elementOp returns the op whose element holds the byte at offset (from the start of message
// m, as the kernel's extended ACK points at the attribute it refused) in an element-list
// message, read from the batch itself: the ops of one element message are consecutive, each
// encoded as one element attribute, except that a single-field interval is followed by its end
// as an attribute of its own, flagged INTERVAL_END. So the op is m's first op plus the starts
// before the element. An offset before the first element (the set's name) names m's first op;
// one past the last, the last element's.
func (b *codecBatch) elementOp(m codecMsg, offset int) int {
	msg := b.w.b[m.off:]
	if len(msg) < nlMsgHdrLen+nlNfgenLen {
		return m.op
	}
	msg = msg[:binary.NativeEndian.Uint32(msg[0:4])]
	if t := binary.NativeEndian.Uint16(msg[4:6]); t != codecMsgTypeNFT|unix.NFT_MSG_NEWSETELEM && t != codecMsgTypeNFT|unix.NFT_MSG_DELSETELEM {
		return m.op
	}
	list, ok := codecAttrAt(msg, nlMsgHdrLen+nlNfgenLen, len(msg), unix.NFTA_SET_ELEM_LIST_ELEMENTS, -1)
	if !ok {
		return m.op
	}
	op, starts := m.op, 0
	for off := list + nlAttrHdrLen; off+nlAttrHdrLen <= list+codecAttrLen(msg, list) && off <= offset; {
		n := codecAttrLen(msg, off)
		if n < nlAttrHdrLen {
			break
		}
		end := false
		if f, ok := codecAttrAt(msg, off+nlAttrHdrLen, off+n, unix.NFTA_SET_ELEM_FLAGS, 4); ok {
			end = binary.BigEndian.Uint32(msg[f+nlAttrHdrLen:])&codecElemIntervalEnd != 0
		}
		if !end {
			op, starts = m.op+starts, starts+1
		}
		off += nlAlign(n)
	}
	return op
}

// codecAttrLen is the length (header included) of the attribute at off in b.
func codecAttrLen(b []byte, off int) int { return int(binary.NativeEndian.Uint16(b[off : off+2])) }

// codecAttrAt returns the offset in b of the first attribute of type typ among those from
// from to to, with at least size bytes of payload when size ≥ 0.
func codecAttrAt(b []byte, from, to int, typ uint16, size int) (int, bool) {
	for off := from; off+nlAttrHdrLen <= to; {
		n := codecAttrLen(b, off)
		if n < nlAttrHdrLen || off+n > to {
			return 0, false
		}
		if binary.NativeEndian.Uint16(b[off+2:off+4])&nlAttrTypeMsk == typ && n-nlAttrHdrLen >= size {
			return off, true
		}
		off += nlAlign(n)
	}
	return 0, false
}

// codecOpName is the "add rule" text of an op, for errors.
func codecOpName(op Op) string {
	kind := "object"
	if op.Object != nil {
		kind = op.Object.objectKind()
	}
	return op.Verb.String() + " " + kind
}

// codecObjectDesc names the object of op readably for errors.
func codecObjectDesc(t Table, op Op) string {
	if p, ok := op.Object.(*Packed); ok {
		e := p.Unpack()
		op.Object = &e
	}
	switch o := op.Object.(type) {
	case *TableObj:
		return t.String()
	case *Chain:
		return fmt.Sprintf("%s %s", t, o.Name)
	case *Set:
		return fmt.Sprintf("%s %s", t, o.Name)
	case *Rule:
		s := fmt.Sprintf("in chain %s %s", t, o.Chain)
		if o.Handle != 0 {
			s += fmt.Sprintf(" handle %d", o.Handle)
		}
		if o.Comment != "" {
			s += fmt.Sprintf(" comment %q", o.Comment)
		}
		return s
	case *Element:
		// As nft writes it ("198.19.0.11 . tcp . 80 : goto svc-…"): the message is read by people.
		return fmt.Sprintf("{ %s } in set %s %s", renderElement(*o), t, o.Set)
	}
	return fmt.Sprintf("%T", op.Object)
}

// codecNotFound builds an error for which IsNotFound holds.
func codecNotFound(format string, a ...any) error {
	return fmt.Errorf(format+": %w", append(a, syscall.ENOENT)...)
}
