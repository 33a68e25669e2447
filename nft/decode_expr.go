package nft

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// This file decodes a rule's raw expressions back into the Expr shapes: a pattern matcher over
// the sequence the encoder (and nft) writes. Bytecode that fits no shape becomes Unknown.

// decodeRaw is one raw expression: its kernel name and the expr type it unmarshalled into.
type decodeRaw struct {
	name string
	e    expr.Any
}

func decodeNewExpr(name string) expr.Any {
	switch name {
	case "payload":
		return &expr.Payload{}
	case "meta":
		return &expr.Meta{}
	case "cmp":
		return &expr.Cmp{}
	case "bitwise":
		return &expr.Bitwise{}
	case "byteorder":
		return &expr.Byteorder{}
	case "lookup":
		return &expr.Lookup{}
	case "ct":
		return &expr.Ct{}
	case "fib":
		return &expr.Fib{}
	case "immediate":
		return &expr.Immediate{}
	case "masq":
		return &expr.Masq{}
	case "nat":
		return &expr.NAT{}
	case "numgen":
		return &expr.Numgen{}
	case "reject":
		return &expr.Reject{}
	case "dynset":
		return &expr.Dynset{}
	case "socket":
		return &expr.Socket{}
	case "redir":
		return &expr.Redir{}
	}
	return nil
}

// decodeExprName returns the expression name in b (NUL-terminated) as a string, the constant
// for the names the decoder knows, so that a rule's expressions allocate no name each.
func decodeExprName(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	switch string(b) {
	case "payload":
		return "payload"
	case "meta":
		return "meta"
	case "cmp":
		return "cmp"
	case "bitwise":
		return "bitwise"
	case "byteorder":
		return "byteorder"
	case "lookup":
		return "lookup"
	case "ct":
		return "ct"
	case "fib":
		return "fib"
	case "immediate":
		return "immediate"
	case "masq":
		return "masq"
	case "nat":
		return "nat"
	case "numgen":
		return "numgen"
	case "reject":
		return "reject"
	case "dynset":
		return "dynset"
	case "socket":
		return "socket"
	case "redir":
		return "redir"
	}
	return string(b)
}

func decodeRawExprs(fam Family, b []byte) []decodeRaw {
	var out []decodeRaw
	for el := nlIter(b); el.next(); {
		var name string
		var data []byte
		for a := nlIter(el.data); a.next(); {
			switch a.typ {
			case unix.NFTA_EXPR_NAME:
				name = decodeExprName(a.data)
			case unix.NFTA_EXPR_DATA:
				data = a.data
			}
		}
		e := decodeNewExpr(name)
		if name == "ct" {
			// google/nftables v0.3.0 reads the direction as 4 bytes; the kernel sends one.
			ct := &expr.Ct{}
			for a := nlIter(data); a.next(); {
				switch a.typ {
				case unix.NFTA_CT_KEY:
					ct.Key = expr.CtKey(nlU32(a.data))
				case unix.NFTA_CT_DREG:
					ct.Register = nlU32(a.data)
				case unix.NFTA_CT_SREG:
					ct.Register, ct.SourceRegister = nlU32(a.data), true
				case unix.NFTA_CT_DIRECTION:
					if len(a.data) > 0 {
						ct.Direction = uint32(a.data[0])
					}
				}
			}
			out = append(out, decodeRaw{name: name, e: ct})
			continue
		}
		if name == "byteorder" {
			// google/nftables v0.3.0 cannot unmarshal byteorder; read its attributes here.
			bo := &expr.Byteorder{}
			for a := nlIter(data); a.next(); {
				switch a.typ {
				case unix.NFTA_BYTEORDER_SREG:
					bo.SourceRegister = nlU32(a.data)
				case unix.NFTA_BYTEORDER_DREG:
					bo.DestRegister = nlU32(a.data)
				case unix.NFTA_BYTEORDER_OP:
					bo.Op = expr.ByteorderOp(nlU32(a.data))
				case unix.NFTA_BYTEORDER_LEN:
					bo.Len = nlU32(a.data)
				case unix.NFTA_BYTEORDER_SIZE:
					bo.Size = nlU32(a.data)
				}
			}
			out = append(out, decodeRaw{name: name, e: bo})
			continue
		}
		if e != nil {
			if err := expr.Unmarshal(byte(fam), data, e); err != nil {
				e = nil
			}
		}
		if imm, ok := e.(*expr.Immediate); ok && imm.Register == unix.NFT_REG_VERDICT {
			v := &expr.Verdict{}
			if err := expr.Unmarshal(byte(fam), data, v); err == nil {
				e = v
			}
		}
		out = append(out, decodeRaw{name: name, e: e})
	}
	return out
}

// decodeRuleExprs decodes NFTA_RULE_EXPRESSIONS into shapes.
func decodeRuleExprs(fam Family, b []byte, sets map[string]*Set) []Expr {
	raws := decodeRawExprs(fam, b)
	var out []Expr
	for i := 0; i < len(raws); {
		e, n := decodeShape(fam, raws[i:], sets)
		if n == 0 {
			out = append(out, Unknown{Description: decodeDescribe(raws[i])})
			i++
			continue
		}
		out = append(out, e)
		i += n
	}
	return out
}

func decodeDescribe(r decodeRaw) string {
	if r.e == nil {
		return fmt.Sprintf("%s (not decoded)", r.name)
	}
	return fmt.Sprintf("%s %+v", r.name, r.e)
}

// decodeField recognises a load of a model field into reg; n is its length in bytes.
func decodeField(fam Family, e expr.Any) (f Field, reg uint32, n int, ok bool) {
	switch e := e.(type) {
	case *expr.Payload:
		if e.OperationType != expr.PayloadLoad {
			return 0, 0, 0, false
		}
		switch e.Base {
		case expr.PayloadBaseNetworkHeader:
			s, d, l := uint32(12), uint32(16), uint32(4)
			if fam == IPv6 {
				s, d, l = 8, 24, 16
			}
			if e.Len == 0 || e.Len > l {
				return 0, 0, 0, false
			}
			switch e.Offset {
			case s:
				return FieldSaddr, e.DestRegister, int(e.Len), true
			case d:
				return FieldDaddr, e.DestRegister, int(e.Len), true
			}
		case expr.PayloadBaseTransportHeader:
			if e.Len == 2 && e.Offset == 0 {
				return FieldSport, e.DestRegister, 2, true
			}
			if e.Len == 2 && e.Offset == 2 {
				return FieldDport, e.DestRegister, 2, true
			}
		}
	case *expr.Meta:
		if e.SourceRegister {
			return 0, 0, 0, false
		}
		switch e.Key {
		case expr.MetaKeyL4PROTO:
			return FieldL4Proto, e.Register, 1, true
		case expr.MetaKeyMARK:
			return FieldMark, e.Register, 4, true
		}
	case *expr.Ct:
		if e.SourceRegister || e.Direction > codecCtReply {
			return 0, 0, 0, false
		}
		reply := e.Direction == codecCtReply
		addr, n := uint32(unix.NFT_CT_DST_IP), 4
		if fam == IPv6 {
			addr, n = unix.NFT_CT_DST_IP6, 16
		}
		switch {
		case uint32(e.Key) == addr && !reply:
			return FieldCtOrigDaddr, e.Register, n, true
		case uint32(e.Key) == addr-1 && reply:
			return FieldCtReplySaddr, e.Register, n, true
		case e.Key == expr.CtKeyPROTODST && !reply:
			return FieldCtOrigProtoDst, e.Register, 2, true
		case e.Key == expr.CtKeyPROTOSRC && reply:
			return FieldCtReplyProtoSrc, e.Register, 2, true
		}
	}
	return 0, 0, 0, false
}

// decodeLoads matches a concatenation loaded from register 1 on (with nft's byteorder
// conversions for interval sets) and returns the fields and the number of raw exprs used.
func decodeLoads(fam Family, raws []decodeRaw) ([]Field, int) {
	return decodeLoadsFrom(fam, raws, 0)
}

// decodeLoadsFrom is decodeLoads from register word w on.
func decodeLoadsFrom(fam Family, raws []decodeRaw, w int) ([]Field, int) {
	var fields []Field
	i := 0
	for i < len(raws) {
		f, reg, n, ok := decodeField(fam, raws[i].e)
		if !ok || reg != codecReg(w) || (n != codecAddrLen(fam) && (f == FieldSaddr || f == FieldDaddr)) {
			break
		}
		i++
		if i < len(raws) {
			if bo, ok := raws[i].e.(*expr.Byteorder); ok && bo.SourceRegister == reg && bo.DestRegister == reg && bo.Op == expr.ByteorderHton {
				i++
			}
		}
		fields = append(fields, f)
		w += codecPad4(n) / 4
	}
	return fields, i
}

func decodeCmpOp(op expr.CmpOp) (neg, ok bool) {
	switch op {
	case expr.CmpOpEq:
		return false, true
	case expr.CmpOpNeq:
		return true, true
	}
	return false, false
}

// decodeShape matches one shape at the start of raws; n is the number of raw exprs it used
// (0: no shape matches).
func decodeShape(fam Family, raws []decodeRaw, sets map[string]*Set) (Expr, int) {
	at := func(i int) expr.Any {
		if i < len(raws) {
			return raws[i].e
		}
		return nil
	}
	if e, n := decodeFieldShape(fam, raws, sets); n > 0 {
		return e, n
	}
	switch e := at(0).(type) {
	case *expr.Ct:
		if e.SourceRegister || e.Register != 1 {
			return nil, 0
		}
		mask, ok := decodeBitTest(at(1), at(2))
		if !ok || !mask.nonZero {
			return nil, 0
		}
		switch e.Key {
		case expr.CtKeySTATE:
			return CtState{Mask: mask.mask}, 3
		case expr.CtKeySTATUS:
			return CtStatus{Mask: mask.mask}, 3
		}
	case *expr.Fib:
		c, ok := at(1).(*expr.Cmp)
		if !ok || e.Register != 1 || c.Register != 1 || !e.ResultADDRTYPE || e.FlagDADDR == e.FlagSADDR || e.FlagMARK || e.FlagIIF || e.FlagOIF {
			return nil, 0
		}
		neg, ok := decodeCmpOp(c.Op)
		if v, ok2 := decodeU32Host(c.Data); !ok || !ok2 || v != unix.RTN_LOCAL {
			return nil, 0
		}
		return FibAddrType{Daddr: e.FlagDADDR, Neg: neg}, 2
	case *expr.Masq:
		if e.Random || e.Persistent || e.ToPorts {
			return nil, 0
		}
		return Masquerade{FullyRandom: e.FullyRandom}, 1
	case *expr.Immediate:
		if r, n := decodeRedirect(raws); n > 0 {
			return r, n
		}
		return decodeDNAT(fam, raws)
	case *expr.Socket:
		c, ok := at(1).(*expr.Cmp)
		if !ok || e.Register != 1 || c.Register != 1 || c.Op != expr.CmpOpEq || len(c.Data) != 1 || c.Data[0] > 1 {
			return nil, 0
		}
		if k := SocketKey(e.Key); e.Key <= 0xff && (k == SocketTransparent || k == SocketWildcard) {
			return SocketMatch{Key: k, Value: c.Data[0] == 1}, 2
		}
	case *expr.Numgen:
		if c, ok := at(1).(*expr.Cmp); ok {
			v, ok2 := decodeU32Host(c.Data)
			if !ok2 || e.Register != 1 || e.Type != unix.NFT_NG_RANDOM || e.Offset != 0 || c.Register != 1 || c.Op != expr.CmpOpEq {
				return nil, 0
			}
			return NumgenMatch{Modulus: e.Modulus, Value: v}, 2
		}
		if e.Register != 1 {
			return nil, 0
		}
		if d, k := decodeDNATNumgen(fam, e, raws[1:]); k > 0 {
			return d, 1 + k
		}
	case *expr.Reject:
		switch {
		case e.Type == unix.NFT_REJECT_TCP_RST:
			return Reject{TCPReset: true}, 1
		case e.Type == unix.NFT_REJECT_ICMP_UNREACH && ((fam == IPv4 && e.Code == 3) || (fam == IPv6 && e.Code == 4)):
			return Reject{}, 1
		}
	case *expr.Verdict:
		v, err := decodeVerdictCode(int32(e.Kind), e.Chain)
		if err != nil {
			return nil, 0
		}
		return v, 1
	}
	return nil, 0
}

type decodeMask struct {
	mask    uint32
	nonZero bool
}

// decodeBitTest matches "bitwise reg1 & mask ^ 0; cmp (neq|eq) reg1 0".
func decodeBitTest(b, c expr.Any) (decodeMask, bool) {
	bw, ok1 := b.(*expr.Bitwise)
	cm, ok2 := c.(*expr.Cmp)
	if !ok1 || !ok2 || bw.SourceRegister != 1 || bw.DestRegister != 1 || bw.Len != 4 || cm.Register != 1 {
		return decodeMask{}, false
	}
	mask, ok3 := decodeU32Host(bw.Mask)
	xor, ok4 := decodeU32Host(bw.Xor)
	zero, ok5 := decodeU32Host(cm.Data)
	neg, ok6 := decodeCmpOp(cm.Op)
	if !ok3 || !ok4 || !ok5 || !ok6 || xor != 0 || zero != 0 {
		return decodeMask{}, false
	}
	return decodeMask{mask: mask, nonZero: neg}, true
}

// decodeFieldShape matches the shapes that start with field loads.
func decodeFieldShape(fam Family, raws []decodeRaw, sets map[string]*Set) (Expr, int) {
	fields, n := decodeLoads(fam, raws)
	if len(fields) > 0 && n < len(raws) {
		switch e := raws[n].e.(type) {
		case *expr.Numgen:
			// "dnat to <fields> . numgen random mod N map @m": loads without byteorder, the
			// number in the next register word.
			if n != len(fields) || e.Register != codecReg(codecKeyWords(fam, fields)) {
				break
			}
			if d, k := decodeDNATNumgen(fam, e, raws[n+1:]); k > 0 {
				d.Key = fields
				return d, n + 1 + k
			}
		case *expr.Lookup:
			if e.SourceRegister != 1 {
				break
			}
			if !e.IsDestRegSet {
				return CmpSet{Fields: fields, Neg: e.Invert, Set: e.SetName}, n + 1
			}
			if e.DestRegister == unix.NFT_REG_VERDICT && !e.Invert {
				return VMap{Fields: fields, Map: e.SetName}, n + 1
			}
			if d, k := decodeDNATMap(fam, fields, e, raws[n+1:]); k > 0 {
				return d, n + 1 + k
			}
		case *expr.Immediate:
			if u, k := decodeUpdateData(fam, fields, raws[n:], sets); k > 0 {
				return u, n + k
			}
		case *expr.Dynset:
			if e.SrcRegKey == 1 && e.SrcRegData == 0 && e.Operation == unix.NFT_DYNSET_OP_UPDATE && !e.Invert && len(e.Exprs) == 0 {
				return SetUpdate{Fields: fields, Set: e.SetName, Timeout: e.Timeout}, n + 1
			}
			if u, ok := decodeUpdateSplit(fam, fields, e); ok {
				return u, n + 1
			}
		default:
			if u, k := decodeUpdateDataFields(fam, fields, raws[n:]); k > 0 {
				return u, n + k
			}
		}
	}
	// Single-field shapes: the load is raws[0] into register 1, with no byteorder.
	f, reg, ln, ok := decodeField(fam, raws[0].e)
	if !ok || reg != 1 || len(raws) < 2 {
		return nil, 0
	}
	at := func(i int) expr.Any {
		if i < len(raws) {
			return raws[i].e
		}
		return nil
	}
	switch e := raws[1].e.(type) {
	case *expr.Cmp:
		neg, ok := decodeCmpOp(e.Op)
		if !ok || e.Register != 1 || len(e.Data) != ln {
			return nil, 0
		}
		if (f == FieldSaddr || f == FieldDaddr) && ln < codecAddrLen(fam) {
			p, ok := decodePrefixAddr(fam, e.Data, ln*8)
			if !ok {
				return nil, 0
			}
			return CmpPrefix{Field: f, Neg: neg, Prefix: p}, 2
		}
		v, err := codecDecodeKey(e.Data, []Type{f.Type(fam)}, false)
		if err != nil {
			return nil, 0
		}
		return Cmp{Field: f, Neg: neg, Value: v[0]}, 2
	case *expr.Bitwise:
		if e.SourceRegister != 1 || e.DestRegister != 1 || int(e.Len) != ln {
			return nil, 0
		}
		switch f {
		case FieldMark:
			if m, ok := decodeBitTest(e, at(2)); ok {
				return MarkTest{Mask: m.mask, NonZero: m.nonZero}, 3
			}
			set, ok := at(2).(*expr.Meta)
			mask, ok1 := decodeU32Host(e.Mask)
			xor, ok2 := decodeU32Host(e.Xor)
			if !ok || !ok1 || !ok2 || !set.SourceRegister || set.Key != expr.MetaKeyMARK || set.Register != 1 {
				return nil, 0
			}
			if mask == 0xffffffff {
				return MarkXor{Bits: xor}, 3
			}
			if mask == ^xor {
				return MarkOr{Bits: xor}, 3
			}
		case FieldSaddr, FieldDaddr:
			c, ok := at(2).(*expr.Cmp)
			if !ok || c.Register != 1 || len(c.Data) != ln || !bytes.Equal(e.Xor, make([]byte, ln)) {
				return nil, 0
			}
			neg, ok := decodeCmpOp(c.Op)
			bitsN, ok2 := decodePrefixLen(e.Mask)
			if !ok || !ok2 {
				return nil, 0
			}
			p, ok := decodePrefixAddr(fam, c.Data, bitsN)
			if !ok || bitsN%8 == 0 && bitsN != 0 {
				return nil, 0 // nft would have loaded only the prefix bytes
			}
			return CmpPrefix{Field: f, Neg: neg, Prefix: p}, 3
		}
	}
	return nil, 0
}

// decodePrefixLen returns the length of a contiguous leading-ones mask.
func decodePrefixLen(mask []byte) (int, bool) {
	n, done := 0, false
	for _, b := range mask {
		if done && b != 0 {
			return 0, false
		}
		l := bits.LeadingZeros8(^b)
		if b<<l != 0 {
			return 0, false
		}
		n += l
		if l < 8 {
			done = true
		}
	}
	return n, true
}

func decodePrefixAddr(fam Family, b []byte, bitsN int) (netip.Prefix, bool) {
	full := make([]byte, codecAddrLen(fam))
	copy(full, b)
	a, ok := netip.AddrFromSlice(full)
	if !ok {
		return netip.Prefix{}, false
	}
	p := netip.PrefixFrom(a, bitsN)
	if p.Masked() != p {
		return netip.Prefix{}, false
	}
	return p, true
}

// decodeDNAT matches "immediate reg1 addr [immediate reg2 port] nat dnat".
func decodeDNAT(fam Family, raws []decodeRaw) (Expr, int) {
	imm, _ := raws[0].e.(*expr.Immediate)
	if imm == nil || imm.Register != 1 || len(imm.Data) != codecAddrLen(fam) {
		return nil, 0
	}
	a, _ := netip.AddrFromSlice(imm.Data)
	d := DNAT{Addr: a}
	n := 1
	if n < len(raws) {
		if p, ok := raws[n].e.(*expr.Immediate); ok && p.Register == 2 && len(p.Data) == 2 {
			d.Port = binary.BigEndian.Uint16(p.Data)
			n++
		}
	}
	if n >= len(raws) {
		return nil, 0
	}
	nat, ok := raws[n].e.(*expr.NAT)
	if !ok || !decodeNATPlain(nat) {
		return nil, 0
	}
	if (d.Port != 0) != (nat.RegProtoMin == 2) {
		return nil, 0
	}
	return d, n + 1
}

// decodeRedirect matches "immediate reg1 port; redir proto_min reg1 [proto_max reg1] flags
// proto-specified", as nft writes "redirect to :port".
func decodeRedirect(raws []decodeRaw) (Expr, int) {
	imm, _ := raws[0].e.(*expr.Immediate)
	if imm == nil || imm.Register != 1 || len(imm.Data) != 2 || len(raws) < 2 {
		return nil, 0
	}
	r, ok := raws[1].e.(*expr.Redir)
	if !ok || r.RegisterProtoMin != 1 || (r.RegisterProtoMax != 0 && r.RegisterProtoMax != 1) || r.Flags != codecNATRangeProtoSpecified {
		return nil, 0
	}
	port := binary.BigEndian.Uint16(imm.Data)
	if port == 0 {
		return nil, 0
	}
	return Redirect{Port: port}, 2
}

// decodeNATPlain matches "dnat" from register 1 with no range and no flags but the one nft sets
// with a port. The kernel reports each max register equal to its min when none was sent.
func decodeNATPlain(nat *expr.NAT) bool {
	return nat.Type == expr.NATTypeDestNAT && nat.RegAddrMin == 1 &&
		(nat.RegAddrMax == 0 || nat.RegAddrMax == nat.RegAddrMin) &&
		(nat.RegProtoMax == 0 || nat.RegProtoMax == nat.RegProtoMin) &&
		nat.Specified == (nat.RegProtoMin != 0) &&
		!nat.Random && !nat.FullyRandom && !nat.Persistent && !nat.Prefix
}

// decodeDNATNumgen matches what follows a random numgen in "dnat to [fields .] numgen random mod
// N map @m": a lookup of the key from register 1 into register 1, then dnat from register 1 (and
// the port from the register after the address). k is the number of raw exprs used after ng.
func decodeDNATNumgen(fam Family, ng *expr.Numgen, rest []decodeRaw) (d DNATNumgen, k int) {
	if len(rest) < 2 || ng.Type != unix.NFT_NG_RANDOM || ng.Offset != 0 {
		return d, 0
	}
	l, ok1 := rest[0].e.(*expr.Lookup)
	nat, ok2 := rest[1].e.(*expr.NAT)
	if !ok1 || !ok2 || l.SourceRegister != 1 || !l.IsDestRegSet || l.DestRegister != 1 || l.Invert || !decodeNATPlain(nat) {
		return d, 0
	}
	d = DNATNumgen{Modulus: ng.Modulus, Map: l.SetName}
	if nat.RegProtoMin != 0 {
		if nat.RegProtoMin != codecReg(codecAddrLen(fam)/4) {
			return DNATNumgen{}, 0
		}
		d.WithPort = true
	}
	return d, 2
}
