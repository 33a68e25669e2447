package nft

import (
	"encoding/binary"
	"fmt"
)

// nft keeps a set's "typeof" definition in the set's userdata as TLVs (1-byte type, 1-byte
// length, value; integers host-endian). The kernel ignores them; nft needs them to list and
// re-read a map keyed by a bare integer, such as our endpoint maps keyed by numgen. The layout
// below is what nft 1.0.6 writes, read off `nft --debug=mnl add map ...`; typeof_test.go holds
// the captured bytes.
const (
	udataSetKeyByteorder  = 0
	udataSetDataByteorder = 1
	udataSetKeyTypeof     = 3
	udataSetDataTypeof    = 4
	udataSetDataInterval  = 6
	udataSetComment       = 7

	udataTypeofExpr = 0 // u32: nft's expression type id
	udataTypeofData = 1 // nested: the expression's own description

	exprPayload = 7  // nft EXPR_PAYLOAD
	exprConcat  = 13 // nft EXPR_CONCAT
	exprNumgen  = 23 // nft EXPR_NUMGEN

	byteorderHost = 1
	byteorderBig  = 2

	protoDescIP  = 12 // nft PROTO_DESC_IP; template 12 is daddr
	protoDescIP6 = 13 // nft PROTO_DESC_IP6; template 9 is daddr
	protoDescTH  = 11 // nft PROTO_DESC_TH; template 2 is dport
	numgenRandom = 1  // NFT_NG_RANDOM
)

func udataAppend(b []byte, typ byte, val []byte) []byte {
	b = append(b, typ, byte(len(val)))
	return append(b, val...)
}

func udataU32(v uint32) []byte {
	b := make([]byte, 4)
	binary.NativeEndian.PutUint32(b, v)
	return b
}

func udataTypeofExprAttr(typ byte, exprID uint32, desc []byte) []byte {
	var in []byte
	in = udataAppend(in, udataTypeofExpr, udataU32(exprID))
	in = udataAppend(in, udataTypeofData, desc)
	return udataAppend(nil, typ, in)
}

func udataPayload(desc, template uint32) []byte {
	var d []byte
	d = udataAppend(d, 0, udataU32(desc))
	d = udataAppend(d, 1, udataU32(template))
	var in []byte
	in = udataAppend(in, udataTypeofExpr, udataU32(exprPayload))
	in = udataAppend(in, udataTypeofData, d)
	return in
}

// numgenMapUserdata returns the userdata nft writes for
// "typeof numgen random mod N : ip daddr [. th dport]" (ip6 daddr in an ip6 table), plus the
// comment if any. It fails for a set that is not of that shape.
func numgenMapUserdata(f Family, s *Set) ([]byte, error) {
	if len(s.Key) != 1 || s.Key[0] != TypeInteger {
		return nil, fmt.Errorf("set %s: a numgen-keyed map needs key type integer, has %v", s.Name, s.Key)
	}
	addrDesc, addrTmpl := uint32(protoDescIP), uint32(12)
	if f == IPv6 {
		addrDesc, addrTmpl = protoDescIP6, 9
	}
	if len(s.Data) == 0 || s.Data[0] != f.AddrType() || len(s.Data) > 2 || (len(s.Data) == 2 && s.Data[1] != TypeInetService) {
		return nil, fmt.Errorf("set %s: a numgen-keyed map needs data %v or %v . inet_service, has %v", s.Name, f.AddrType(), f.AddrType(), s.Data)
	}
	var ng []byte
	ng = udataAppend(ng, 0, udataU32(numgenRandom))
	ng = udataAppend(ng, 1, udataU32(s.NumgenKey))
	ng = udataAppend(ng, 2, udataU32(0)) // offset

	var b []byte
	b = udataAppend(b, udataSetKeyByteorder, udataU32(byteorderHost))
	var data []byte
	if len(s.Data) == 1 {
		b = udataAppend(b, udataSetDataByteorder, udataU32(byteorderBig))
		data = udataAppend(nil, udataSetDataTypeof, udataPayload(addrDesc, addrTmpl))
	} else {
		b = udataAppend(b, udataSetDataByteorder, udataU32(0)) // nft leaves a concatenation's order unset
		var parts []byte
		parts = udataAppend(parts, 0, udataPayload(addrDesc, addrTmpl))
		parts = udataAppend(parts, 1, udataPayload(protoDescTH, 2))
		data = udataTypeofExprAttr(udataSetDataTypeof, exprConcat, parts)
	}
	b = append(b, udataTypeofExprAttr(udataSetKeyTypeof, exprNumgen, ng)...)
	b = append(b, data...)
	b = udataAppend(b, udataSetDataInterval, udataU32(0))
	if s.Comment != "" {
		b = udataAppend(b, udataSetComment, append([]byte(s.Comment), 0))
	}
	return b, nil
}

// numgenModFromUserdata reads the modulus back from a set's userdata (0 when the set has no
// numgen typeof key).
func numgenModFromUserdata(ud []byte) uint32 {
	for len(ud) >= 2 {
		typ, l := ud[0], int(ud[1])
		if len(ud) < 2+l {
			return 0
		}
		val := ud[2 : 2+l]
		ud = ud[2+l:]
		if typ != udataSetKeyTypeof || len(val) < 6 || val[0] != udataTypeofExpr || val[1] != 4 {
			continue
		}
		if binary.NativeEndian.Uint32(val[2:6]) != exprNumgen {
			return 0
		}
		desc := val[6:]
		if len(desc) < 2 || desc[0] != udataTypeofData {
			return 0
		}
		in := desc[2:]
		for len(in) >= 6 {
			t, il := in[0], int(in[1])
			if il != 4 || len(in) < 2+il {
				return 0
			}
			if t == 1 {
				return binary.NativeEndian.Uint32(in[2:6])
			}
			in = in[2+il:]
		}
	}
	return 0
}
