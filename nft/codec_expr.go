package nft

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// This file turns each Expr shape into the expression list nft 1.0.6 generates for the same rule
// text (checked shape by shape against `nft --debug=netlink add rule ...`, see README.md).

// codecSetRef is what the rule encoder must know about a set a rule names.
type codecSetRef struct {
	interval bool   // nft converts host-order fields to big-endian for interval sets
	id       uint32 // NFTA_SET_ID when the set is created in the same batch, else 0
	data     []Type // a map's value types (for DNATNumgen)
}

// codecRuleCtx gives the rule encoder the family and the sets it may reference.
type codecRuleCtx struct {
	fam  Family
	sets func(name string) (codecSetRef, error)
}

// codecReg is the register nft uses for the field at 32-bit word offset w of a concatenation:
// a 16-byte register (NFT_REG_1..4) where one starts, else the 32-bit register NFT_REG32_00+w.
func codecReg(w int) uint32 {
	if w%4 == 0 {
		return uint32(unix.NFT_REG_1 + w/4)
	}
	return uint32(unix.NFT_REG32_00 + w)
}

// codecFieldLoad returns the expression loading field f of family fam into register reg.
func codecFieldLoad(fam Family, f Field, reg uint32) (expr.Any, int, error) {
	addrOff := func(v4, v6 uint32) (expr.Any, int, error) {
		if fam == IPv6 {
			return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: v6, Len: 16}, 16, nil
		}
		return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseNetworkHeader, Offset: v4, Len: 4}, 4, nil
	}
	switch f {
	case FieldSaddr:
		return addrOff(12, 8)
	case FieldDaddr:
		return addrOff(16, 24)
	case FieldL4Proto:
		return &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: reg}, 1, nil
	case FieldSport:
		return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2}, 2, nil
	case FieldDport:
		return &expr.Payload{DestRegister: reg, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2}, 2, nil
	case FieldMark:
		return &expr.Meta{Key: expr.MetaKeyMARK, Register: reg}, 4, nil
	case FieldCtOrigDaddr, FieldCtReplySaddr:
		// nft loads "ct original ip daddr" with the family's own key (dst_ip, dst_ip6), not the
		// generic dst: only then does it list the field as "ip daddr".
		key, n := uint32(unix.NFT_CT_DST_IP), 4
		if fam == IPv6 {
			key, n = unix.NFT_CT_DST_IP6, 16
		}
		if f == FieldCtReplySaddr {
			key-- // src_ip, src_ip6
		}
		return &expr.Ct{Register: reg, Key: expr.CtKey(key), Direction: codecCtDir(f)}, n, nil
	case FieldCtOrigProtoDst:
		return &expr.Ct{Register: reg, Key: expr.CtKeyPROTODST, Direction: codecCtDir(f)}, 2, nil
	case FieldCtReplyProtoSrc:
		return &expr.Ct{Register: reg, Key: expr.CtKeyPROTOSRC, Direction: codecCtDir(f)}, 2, nil
	}
	return nil, 0, fmt.Errorf("unsupported field %d: use one of the Field constants", f)
}

// Conntrack directions (IP_CT_DIR_ORIGINAL, IP_CT_DIR_REPLY).
const (
	codecCtOriginal = 0
	codecCtReply    = 1
)

func codecCtDir(f Field) uint32 {
	if f == FieldCtReplySaddr || f == FieldCtReplyProtoSrc {
		return codecCtReply
	}
	return codecCtOriginal
}

// codecCtTupleKey reports whether a ct load of key k takes a direction.
func codecCtTupleKey(k expr.CtKey) bool {
	switch k {
	case expr.CtKeySRC, expr.CtKeyDST, expr.CtKeyPROTOSRC, expr.CtKeyPROTODST,
		unix.NFT_CT_SRC_IP, unix.NFT_CT_DST_IP, unix.NFT_CT_SRC_IP6, unix.NFT_CT_DST_IP6:
		return true
	}
	return false
}

// codecCtTuple appends a ct load with a direction as one list element. google/nftables v0.3.0
// cannot: it sends no direction for the family keys (src_ip, dst_ip...), which the kernel
// refuses, and sends the direction as 4 bytes where the kernel reads one (NLA_U8), so "reply"
// would arrive as "original".
func codecCtTuple(w *nlBuf, ct *expr.Ct) {
	el := w.nest(unix.NFTA_LIST_ELEM)
	w.str(unix.NFTA_EXPR_NAME, "ct")
	d := w.nest(unix.NFTA_EXPR_DATA)
	w.u32(unix.NFTA_CT_KEY, uint32(ct.Key))
	w.u32(unix.NFTA_CT_DREG, ct.Register)
	w.attr(unix.NFTA_CT_DIRECTION, []byte{byte(ct.Direction)})
	w.endNest(d)
	w.endNest(el)
}

// codecKeyLoads loads a concatenation of fields starting at register 1, as nft does. For interval
// sets nft adds a byteorder conversion after host-order loads (meta l4proto: hton size 2 len 1, a
// no-op it emits anyway; meta mark: hton 4 bytes, because interval keys compare bytewise).
func codecKeyLoads(fam Family, fields []Field, interval bool) ([]expr.Any, error) {
	return codecLoadsFrom(fam, fields, 0, interval)
}

// codecLoadsFrom loads a concatenation of fields from register word w on.
func codecLoadsFrom(fam Family, fields []Field, w int, interval bool) ([]expr.Any, error) {
	if len(fields) == 0 {
		return nil, fmt.Errorf("a set lookup needs at least one field")
	}
	var out []expr.Any
	for _, f := range fields {
		reg := codecReg(w)
		e, n, err := codecFieldLoad(fam, f, reg)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		if interval {
			switch f {
			case FieldL4Proto:
				out = append(out, &expr.Byteorder{SourceRegister: reg, DestRegister: reg, Op: expr.ByteorderHton, Len: 1, Size: 2})
			case FieldMark:
				out = append(out, &expr.Byteorder{SourceRegister: reg, DestRegister: reg, Op: expr.ByteorderHton, Len: 4, Size: 4})
			}
		}
		w += codecPad4(n) / 4
	}
	return out, nil
}

// codecKeyWords is how many 32-bit register words a concatenation of fields takes.
func codecKeyWords(fam Family, fields []Field) int {
	w := 0
	for _, f := range fields {
		ti, _ := codecType(f.Type(fam))
		w += codecPad4(ti.len) / 4
	}
	return w
}

// codecFieldBytes encodes v as field f stores it in a register (compare operand).
func codecFieldBytes(fam Family, f Field, v Value) ([]byte, error) {
	want := f.Type(fam)
	if want == TypeInvalid {
		return nil, fmt.Errorf("unsupported field %d", f)
	}
	return codecAppendValue(nil, v, want, false)
}

func codecVerdict(v Verdict) (*expr.Verdict, error) {
	k, err := codecVerdictKind(v)
	if err != nil {
		return nil, err
	}
	return &expr.Verdict{Kind: k, Chain: v.Chain}, nil
}

// codecVerdictKind is the kernel's verdict code for v (NF_ACCEPT, NFT_GOTO, ...), checked for
// a chain exactly when it jumps; map elements use it without building an expression.
func codecVerdictKind(v Verdict) (expr.VerdictKind, error) {
	var k expr.VerdictKind
	switch v.Kind {
	case VerdictAccept:
		k = expr.VerdictAccept
	case VerdictDrop:
		k = expr.VerdictDrop
	case VerdictReturn:
		k = expr.VerdictReturn
	case VerdictContinue:
		k = expr.VerdictContinue
	case VerdictJump:
		k = expr.VerdictJump
	case VerdictGoto:
		k = expr.VerdictGoto
	default:
		return 0, fmt.Errorf("unknown verdict kind %d", v.Kind)
	}
	if (v.Kind == VerdictJump || v.Kind == VerdictGoto) != (v.Chain != "") {
		return 0, fmt.Errorf("verdict %d: jump and goto need a chain, other verdicts none", v.Kind)
	}
	return k, nil
}

func codecU32Host(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// codecBitTest is "load; bitwise & mask; cmp (neq|eq) 0", the shape of mark and ct bit tests.
func codecBitTest(load expr.Any, mask uint32, nonZero bool) []expr.Any {
	op := expr.CmpOpEq
	if nonZero {
		op = expr.CmpOpNeq
	}
	return []expr.Any{load,
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: codecU32Host(mask), Xor: codecU32Host(0)},
		&expr.Cmp{Op: op, Register: 1, Data: codecU32Host(0)},
	}
}

func codecCmpOp(neg bool) expr.CmpOp {
	if neg {
		return expr.CmpOpNeq
	}
	return expr.CmpOpEq
}

// codecPrefix encodes "addr-field [!=] prefix": a byte-aligned prefix loads only its bytes; any
// other length loads the whole address and masks it.
func codecPrefix(fam Family, e CmpPrefix) ([]expr.Any, error) {
	p := e.Prefix.Masked()
	if (fam == IPv6) != (p.Addr().Is6() && !p.Addr().Is4In6()) {
		return nil, fmt.Errorf("prefix %v does not belong to a %v table", e.Prefix, fam)
	}
	if e.Field != FieldSaddr && e.Field != FieldDaddr {
		return nil, fmt.Errorf("a prefix match needs an address field")
	}
	load, n, err := codecFieldLoad(fam, e.Field, 1)
	if err != nil {
		return nil, err
	}
	addr := p.Addr().AsSlice()
	bits := p.Bits()
	if bits > 0 && bits%8 == 0 {
		if bits/8 < n {
			pl := load.(*expr.Payload)
			pl.Len = uint32(bits / 8)
		}
		return []expr.Any{load, &expr.Cmp{Op: codecCmpOp(e.Neg), Register: 1, Data: addr[:bits/8]}}, nil
	}
	mask := make([]byte, n)
	for i := 0; i < bits; i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	return []expr.Any{load,
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: uint32(n), Mask: mask, Xor: make([]byte, n)},
		&expr.Cmp{Op: codecCmpOp(e.Neg), Register: 1, Data: addr},
	}, nil
}

func codecAddrBytes(fam Family, a netip.Addr) ([]byte, error) {
	a = a.Unmap()
	if fam == IPv6 {
		if !a.Is6() {
			return nil, fmt.Errorf("address %v is not IPv6 but the table is ip6", a)
		}
	} else if !a.Is4() {
		return nil, fmt.Errorf("address %v is not IPv4 but the table is ip", a)
	}
	return a.AsSlice(), nil
}

// codecExpr encodes one Expr shape.
func (c *codecRuleCtx) codecExpr(e Expr) ([]expr.Any, error) {
	fam := c.fam
	switch e := e.(type) {
	case Cmp:
		load, _, err := codecFieldLoad(fam, e.Field, 1)
		if err != nil {
			return nil, err
		}
		b, err := codecFieldBytes(fam, e.Field, e.Value)
		if err != nil {
			return nil, err
		}
		return []expr.Any{load, &expr.Cmp{Op: codecCmpOp(e.Neg), Register: 1, Data: b}}, nil
	case CmpPrefix:
		return codecPrefix(fam, e)
	case CmpSet:
		ref, err := c.sets(e.Set)
		if err != nil {
			return nil, err
		}
		loads, err := codecKeyLoads(fam, e.Fields, ref.interval)
		if err != nil {
			return nil, err
		}
		return append(loads, &expr.Lookup{SourceRegister: 1, SetName: e.Set, SetID: ref.id, Invert: e.Neg}), nil
	case VMap:
		ref, err := c.sets(e.Map)
		if err != nil {
			return nil, err
		}
		loads, err := codecKeyLoads(fam, e.Fields, ref.interval)
		if err != nil {
			return nil, err
		}
		return append(loads, &expr.Lookup{SourceRegister: 1, IsDestRegSet: true, DestRegister: unix.NFT_REG_VERDICT, SetName: e.Map, SetID: ref.id}), nil
	case MarkTest:
		return codecBitTest(&expr.Meta{Key: expr.MetaKeyMARK, Register: 1}, e.Mask, e.NonZero), nil
	case CtState:
		return codecBitTest(&expr.Ct{Key: expr.CtKeySTATE, Register: 1}, e.Mask, true), nil
	case CtStatus:
		return codecBitTest(&expr.Ct{Key: expr.CtKeySTATUS, Register: 1}, e.Mask, true), nil
	case FibAddrType:
		return []expr.Any{
			&expr.Fib{Register: 1, FlagDADDR: e.Daddr, FlagSADDR: !e.Daddr, ResultADDRTYPE: true},
			&expr.Cmp{Op: codecCmpOp(e.Neg), Register: 1, Data: codecU32Host(unix.RTN_LOCAL)},
		}, nil
	case MarkOr:
		return codecMarkSet(^e.Bits, e.Bits), nil
	case MarkXor:
		return codecMarkSet(0xffffffff, e.Bits), nil
	case Masquerade:
		return []expr.Any{&expr.Masq{FullyRandom: e.FullyRandom}}, nil
	case DNAT:
		a, err := codecAddrBytes(fam, e.Addr)
		if err != nil {
			return nil, err
		}
		out := []expr.Any{&expr.Immediate{Register: 1, Data: a}}
		nat := &expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(fam), RegAddrMin: 1}
		if e.Port != 0 {
			out = append(out, &expr.Immediate{Register: 2, Data: binary.BigEndian.AppendUint16(nil, e.Port)})
			nat.RegProtoMin, nat.Specified = 2, true
		}
		return append(out, nat), nil
	case DNATNumgen:
		if e.Modulus == 0 {
			return nil, fmt.Errorf("numgen modulus must be at least 1")
		}
		if !ValidNumgenKey(e.Key) {
			return nil, fmt.Errorf("dnat numgen key fields %v: use none, %v or %v", e.Key, DNATNumgenKeyAddr, DNATNumgenKeyPort)
		}
		ref, err := c.sets(e.Map)
		if err != nil {
			return nil, err
		}
		var out []expr.Any
		words := 0
		if len(e.Key) > 0 {
			if ref.interval {
				return nil, fmt.Errorf("map %s: a numgen map with a key must not be an interval map", e.Map)
			}
			// The fields then the random number, one concatenation from register 1 on, as nft
			// allocates it: ip "daddr . l4proto . dport . numgen" in registers 1, 9, 10, 11.
			if out, err = codecKeyLoads(fam, e.Key, false); err != nil {
				return nil, err
			}
			words = codecKeyWords(fam, e.Key)
		}
		nat := &expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(fam), RegAddrMin: 1}
		if e.WithPort {
			nat.RegProtoMin, nat.Specified = codecReg(codecAddrLen(fam)/4), true
		}
		return append(out,
			&expr.Numgen{Register: codecReg(words), Modulus: e.Modulus, Type: unix.NFT_NG_RANDOM},
			&expr.Lookup{SourceRegister: 1, IsDestRegSet: true, DestRegister: 1, SetName: e.Map, SetID: ref.id},
			nat,
		), nil
	case NumgenMatch:
		// A zero modulus is sent as is: the kernel refuses it with ERANGE, as the fake does.
		return []expr.Any{
			&expr.Numgen{Register: 1, Modulus: e.Modulus, Type: unix.NFT_NG_RANDOM},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: codecU32Host(e.Value)},
		}, nil
	case Reject:
		if e.TCPReset {
			return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_TCP_RST}}, nil
		}
		code := uint8(3) // ICMP_PORT_UNREACH
		if fam == IPv6 {
			code = 4 // ICMPV6_PORT_UNREACH
		}
		return []expr.Any{&expr.Reject{Type: unix.NFT_REJECT_ICMP_UNREACH, Code: code}}, nil
	case SetUpdate:
		ref, err := c.sets(e.Set)
		if err != nil {
			return nil, err
		}
		loads, err := codecKeyLoads(fam, e.Fields, ref.interval)
		if err != nil {
			return nil, err
		}
		ds := &expr.Dynset{SrcRegKey: 1, SetName: e.Set, SetID: ref.id, Operation: unix.NFT_DYNSET_OP_UPDATE, Timeout: e.Timeout}
		if len(e.DataFields) > 0 {
			// The data's fields loaded from the next 16-byte register after the key, as nft
			// 1.0.6 does (ip "saddr . ct original daddr . l4proto . ct original proto-dst : ct
			// reply saddr . ct reply proto-src": key in 1, 9, 10, 11, data in 2, 13).
			if len(e.Data) > 0 {
				return nil, fmt.Errorf("update of map %s: constant data and data fields together", e.Set)
			}
			if len(ref.data) != len(e.DataFields) {
				return nil, fmt.Errorf("update of map %s: data has %d fields, the map %d", e.Set, len(e.DataFields), len(ref.data))
			}
			for k, f := range e.DataFields {
				if t := f.Type(fam); t != ref.data[k] {
					return nil, fmt.Errorf("update of map %s: data field %d is %s, the map wants %s", e.Set, k, t, ref.data[k])
				}
			}
			w := codecKeyWords(fam, e.Fields)
			w += (4 - w%4) % 4
			dl, err := codecLoadsFrom(fam, e.DataFields, w, false)
			if err != nil {
				return nil, err
			}
			ds.SrcRegData = codecReg(w)
			if w += codecKeyWords(fam, e.DataFields); w > 16 {
				return nil, fmt.Errorf("update of map %s: key and data take %d register words, the kernel has 16", e.Set, w)
			}
			return append(append(loads, dl...), ds), nil
		}
		if len(e.Data) > 0 {
			// The data's fields as immediates of their own length (not padded) in the register
			// words after the key, as nft 1.0.6 allocates them (ip "saddr . daddr . l4proto .
			// dport : addr . port": key in 1, 9, 10, 11, data in 2, 13).
			if len(ref.data) != len(e.Data) {
				return nil, fmt.Errorf("update of map %s: data has %d fields, the map %d", e.Set, len(e.Data), len(ref.data))
			}
			w := codecKeyWords(fam, e.Fields)
			if w%4 != 0 {
				w += 4 - w%4 // nft starts the data at the next 16-byte register
			}
			ds.SrcRegData = codecReg(w)
			for k, v := range e.Data {
				b, err := codecAppendValue(nil, v, ref.data[k], false)
				if err != nil {
					return nil, fmt.Errorf("update of map %s: data field %d: %w", e.Set, k, err)
				}
				loads = append(loads, &expr.Immediate{Register: codecReg(w), Data: b})
				w += codecPad4(len(b)) / 4
			}
			if w > 16 {
				return nil, fmt.Errorf("update of map %s: key and data take %d register words, the kernel has 16", e.Set, w)
			}
		}
		return append(loads, ds), nil
	case DNATMap:
		ref, err := c.sets(e.Map)
		if err != nil {
			return nil, err
		}
		if ref.interval {
			return nil, fmt.Errorf("map %s: dnat from a map needs a hash map, not an interval map", e.Map)
		}
		loads, err := codecKeyLoads(fam, e.Fields, false)
		if err != nil {
			return nil, err
		}
		if e.WithPort && e.Port != 0 {
			return nil, fmt.Errorf("dnat from map %s: a port from the map and a constant port", e.Map)
		}
		out := append(loads, &expr.Lookup{SourceRegister: 1, IsDestRegSet: true, DestRegister: 1, SetName: e.Map, SetID: ref.id})
		nat := &expr.NAT{Type: expr.NATTypeDestNAT, Family: uint32(fam), RegAddrMin: 1}
		switch {
		case e.WithPort:
			nat.RegProtoMin, nat.Specified = codecReg(codecAddrLen(fam)/4), true
		case e.Port != 0:
			out = append(out, &expr.Immediate{Register: 2, Data: binary.BigEndian.AppendUint16(nil, e.Port)})
			nat.RegProtoMin, nat.Specified = 2, true
		}
		return append(out, nat), nil
	case SocketMatch:
		if e.Key != SocketTransparent && e.Key != SocketWildcard {
			return nil, fmt.Errorf("socket key %d: use SocketTransparent or SocketWildcard", e.Key)
		}
		// A 1-byte compare, as nft writes it for a boolean key.
		val := byte(0)
		if e.Value {
			val = 1
		}
		return []expr.Any{
			&expr.Socket{Key: expr.SocketKey(e.Key), Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{val}},
		}, nil
	case Redirect:
		if e.Port == 0 {
			return nil, fmt.Errorf("redirect needs a port")
		}
		return []expr.Any{
			&expr.Immediate{Register: 1, Data: binary.BigEndian.AppendUint16(nil, e.Port)},
			&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: codecNATRangeProtoSpecified},
		}, nil
	case Verdict:
		v, err := codecVerdict(e)
		if err != nil {
			return nil, err
		}
		return []expr.Any{v}, nil
	case Unknown:
		return nil, fmt.Errorf("cannot send an Unknown expression (%q): it only describes bytecode read back", e.Description)
	}
	return nil, fmt.Errorf("unsupported expression %T", e)
}

// codecNATRangeProtoSpecified is NF_NAT_RANGE_PROTO_SPECIFIED, the flag nft sets on a nat
// statement with a port.
const codecNATRangeProtoSpecified = 0x2

func codecAddrLen(fam Family) int {
	if fam == IPv6 {
		return 16
	}
	return 4
}

// codecMarkSet is "meta mark set meta mark & mask ^ xor".
func codecMarkSet(mask, xor uint32) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: codecU32Host(mask), Xor: codecU32Host(xor)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

// codecRuleExprs encodes a rule's expressions into NFTA_RULE_EXPRESSIONS list elements.
func (c *codecRuleCtx) codecRuleExprs(w *nlBuf, r *Rule) error {
	n := w.nest(unix.NFTA_RULE_EXPRESSIONS)
	for i, e := range r.Exprs {
		raws, err := c.codecExpr(e)
		if err != nil {
			return fmt.Errorf("expression %d (%T): %w", i, e, err)
		}
		for _, raw := range raws {
			if ct, ok := raw.(*expr.Ct); ok && codecCtTupleKey(ct.Key) {
				codecCtTuple(w, ct)
				continue
			}
			b, err := expr.Marshal(byte(c.fam), raw)
			if err != nil {
				return fmt.Errorf("expression %d (%T): marshal: %w", i, e, err)
			}
			w.attr(unix.NFTA_LIST_ELEM|nlAttrNested, b)
		}
	}
	w.endNest(n)
	return nil
}
