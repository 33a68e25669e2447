package nft

import "golang.org/x/sys/unix"

// This file writes nft's "typeof" set userdata: the expressions a set's key and a map's value are
// filled from. nft refuses "type integer" in a map declaration, so a map keyed (entirely, or in
// its last field) by a numgen result can only be listed and re-read by nft in its typeof form:
//
//	typeof numgen random mod 2 : ip daddr . th dport
//	typeof ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport
//
// The bytes are those nft 1.0.6 writes for the same declaration (`nft --debug=mnl -f`), field by
// field and in its order: key byte order, data byte order, key typeof, data typeof, data interval.

// nft's userdata attribute types and expression ids (libnftnl's NFTNL_UDATA_*, nft's enum
// expr_types and proto descriptions).
const (
	typeofUdataKey      = 3  // NFTNL_UDATA_SET_KEY_TYPEOF
	typeofUdataData     = 4  // NFTNL_UDATA_SET_DATA_TYPEOF
	typeofUdataInterval = 6  // NFTNL_UDATA_SET_DATA_INTERVAL
	typeofExprType      = 0  // NFTNL_UDATA_SET_TYPEOF_EXPR (also CONCAT_SUB_TYPE)
	typeofExprData      = 1  // NFTNL_UDATA_SET_TYPEOF_DATA (also CONCAT_SUB_DATA)
	typeofExprVerdict   = 1  // EXPR_VERDICT
	typeofExprPayload   = 7  // EXPR_PAYLOAD
	typeofExprMeta      = 9  // EXPR_META
	typeofExprConcat    = 13 // EXPR_CONCAT
	typeofExprNumgen    = 23 // EXPR_NUMGEN
	typeofProtoTH       = 11 // PROTO_DESC_TH
	typeofProtoIP       = 12 // PROTO_DESC_IP
	typeofProtoIP6      = 13 // PROTO_DESC_IP6
	typeofThDport       = 2  // THDR_DPORT
	typeofIPDaddr       = 12 // IPHDR_DADDR
	typeofIP6Daddr      = 9  // IP6HDR_DADDR
	typeofNumgenType    = 0  // NFTNL_UDATA_NUMGEN_TYPE
	typeofNumgenMod     = 1  // NFTNL_UDATA_NUMGEN_MODULUS
	typeofNumgenOffset  = 2  // NFTNL_UDATA_NUMGEN_OFFSET
	typeofMetaKey       = 0  // NFTNL_UDATA_META_KEY
)

// codecTypeofKeyed reports whether s needs the typeof form: its key (last field) is an integer.
func codecTypeofKeyed(s *Set) bool {
	return len(s.Key) > 0 && s.Key[len(s.Key)-1] == TypeInteger
}

func typeofNested(typ byte, inner []byte) []byte {
	return append([]byte{typ, byte(len(inner))}, inner...)
}

// typeofExpr is one expression's description: its type, then its own attributes nested.
func typeofExpr(etype uint32, data []byte) []byte {
	return append(codecUdataU32(nil, typeofExprType, etype), typeofNested(typeofExprData, data)...)
}

// typeofField describes the expression a field of type t is filled from: addresses from
// "ip daddr"/"ip6 daddr", ports from "th dport", protocols from "meta l4proto", marks from
// "meta mark", integers from "numgen random mod mod".
func typeofField(t Type, mod uint32) []byte {
	payload := func(desc, field uint32) []byte {
		return typeofExpr(typeofExprPayload, codecUdataU32(codecUdataU32(nil, 0, desc), 1, field))
	}
	switch t {
	case TypeIPv4Addr:
		return payload(typeofProtoIP, typeofIPDaddr)
	case TypeIPv6Addr:
		return payload(typeofProtoIP6, typeofIP6Daddr)
	case TypeInetService:
		return payload(typeofProtoTH, typeofThDport)
	case TypeInetProto:
		return typeofExpr(typeofExprMeta, codecUdataU32(nil, typeofMetaKey, unix.NFT_META_L4PROTO))
	case TypeMark:
		return typeofExpr(typeofExprMeta, codecUdataU32(nil, typeofMetaKey, unix.NFT_META_MARK))
	case TypeInteger:
		if mod == 0 {
			mod = 1
		}
		ng := codecUdataU32(nil, typeofNumgenType, unix.NFT_NG_RANDOM)
		ng = codecUdataU32(ng, typeofNumgenMod, mod)
		ng = codecUdataU32(ng, typeofNumgenOffset, 0)
		return typeofExpr(typeofExprNumgen, ng)
	case TypeVerdict:
		return typeofExpr(typeofExprVerdict, nil)
	}
	return nil
}

// typeofTypes describes a key or value: one field as itself, several as a concatenation whose
// i-th member is nested under attribute i.
func typeofTypes(ts []Type, mod uint32) []byte {
	if len(ts) == 1 {
		return typeofField(ts[0], mod)
	}
	var list []byte
	for i, t := range ts {
		list = append(list, typeofNested(byte(i), typeofField(t, mod))...)
	}
	return typeofExpr(typeofExprConcat, list)
}

// codecTypeofUdata appends, after the key byte order, what nft writes for a typeof-keyed set:
// for a map the data byte order, then the key's typeof (numgen modulus mod, 1 if 0), then for a
// map the value's typeof and its interval flag (0).
func codecTypeofUdata(b []byte, s *Set, mod uint32) []byte {
	if s.IsMap() {
		b = codecUdataU32(b, codecUdataSetDataOrder, codecKeyByteOrder(s.Data, false))
	}
	b = append(b, typeofNested(typeofUdataKey, typeofTypes(s.Key, mod))...)
	if s.IsMap() {
		b = append(b, typeofNested(typeofUdataData, typeofTypes(s.Data, 0))...)
		b = codecUdataU32(b, typeofUdataInterval, 0)
	}
	return b
}

// decodeNumgenTypeof returns N of a key typeof whose (last) field is "numgen random mod N", or 0.
func decodeNumgenTypeof(b []byte) uint32 {
	t := decodeUdata(b)
	etype, ok := decodeU32Host(t[typeofExprType])
	if !ok {
		return 0
	}
	data := t[typeofExprData]
	if etype == typeofExprConcat {
		// The members are nested under attributes 0, 1, ...: take the last one.
		members := decodeUdata(data)
		last, found := byte(0), false
		for typ := range members {
			if !found || typ > last {
				last, found = typ, true
			}
		}
		if !found {
			return 0
		}
		m := decodeUdata(members[last])
		if etype, ok = decodeU32Host(m[typeofExprType]); !ok {
			return 0
		}
		data = m[typeofExprData]
	}
	if etype != typeofExprNumgen {
		return 0
	}
	mod, _ := decodeU32Host(decodeUdata(data)[typeofNumgenMod])
	return mod
}
