package nft

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The shapes of dynamic maps read back: "dnat to <fields> map @m" and "update @m { <fields> :
// <constants> }" (see README.md, "Dynamic maps").

// decodeDNATMap matches what follows the key loads of "dnat to <fields> map @m": a lookup from
// register 1 into register 1, then dnat from register 1 (and the port from the register after
// the address, or a constant port from an immediate in register 2). k is the number of raw exprs
// used after the lookup.
func decodeDNATMap(fam Family, fields []Field, l *expr.Lookup, rest []decodeRaw) (d DNATMap, k int) {
	if len(rest) < 1 || l.DestRegister != 1 || l.Invert {
		return d, 0
	}
	d = DNATMap{Fields: fields, Map: l.SetName}
	k = 1
	if p, ok := rest[0].e.(*expr.Immediate); ok && p.Register == 2 && len(p.Data) == 2 && len(rest) > 1 {
		d.Port, k = binary.BigEndian.Uint16(p.Data), 2
	}
	nat, ok := rest[k-1].e.(*expr.NAT)
	if !ok || !decodeNATPlain(nat) {
		return DNATMap{}, 0
	}
	switch {
	case d.Port != 0:
		if nat.RegProtoMin != 2 {
			return DNATMap{}, 0
		}
	case nat.RegProtoMin != 0:
		if nat.RegProtoMin != codecReg(codecAddrLen(fam)/4) {
			return DNATMap{}, 0
		}
		d.WithPort = true
	}
	return d, k
}

// decodeUpdateData matches "update @m { <fields> : <constants> }" after the key loads: one
// immediate per data field in the register words after the key (from the next 16-byte
// register), then the dynset reading them. The map's data types decode the constants.
func decodeUpdateData(fam Family, fields []Field, raws []decodeRaw, sets map[string]*Set) (SetUpdate, int) {
	w := codecKeyWords(fam, fields)
	if w%4 != 0 {
		w += 4 - w%4
	}
	first := codecReg(w)
	var imms []*expr.Immediate
	i := 0
	for ; i < len(raws); i++ {
		imm, ok := raws[i].e.(*expr.Immediate)
		if !ok {
			break
		}
		if imm.Register != codecReg(w) {
			return SetUpdate{}, 0
		}
		imms = append(imms, imm)
		w += codecPad4(len(imm.Data)) / 4
	}
	if i >= len(raws) {
		return SetUpdate{}, 0
	}
	ds, ok := raws[i].e.(*expr.Dynset)
	if !ok || ds.SrcRegKey != 1 || ds.SrcRegData != first || ds.Operation != unix.NFT_DYNSET_OP_UPDATE || ds.Invert || len(ds.Exprs) != 0 {
		return SetUpdate{}, 0
	}
	s := sets[ds.SetName]
	if s == nil || len(s.Data) != len(imms) {
		return SetUpdate{}, 0
	}
	data := make([]Value, len(imms))
	for k, imm := range imms {
		v, err := codecDecodeKey(imm.Data, s.Data[k:k+1], false)
		if err != nil {
			return SetUpdate{}, 0
		}
		data[k] = v[0]
	}
	return SetUpdate{Fields: fields, Set: ds.SetName, Timeout: ds.Timeout, Data: data}, i + 1
}

// decodeUpdateSplit matches "update @m { <key fields> : <data fields> }" whose key ends on a
// 16-byte register: the key and data loads then read as one run of loads, and the dynset's data
// register says where the key ends.
func decodeUpdateSplit(fam Family, fields []Field, ds *expr.Dynset) (SetUpdate, bool) {
	if ds.SrcRegKey != 1 || ds.SrcRegData == 0 || ds.Operation != unix.NFT_DYNSET_OP_UPDATE || ds.Invert || len(ds.Exprs) != 0 {
		return SetUpdate{}, false
	}
	w := 0
	for i, f := range fields {
		if i > 0 && w%4 == 0 && codecReg(w) == ds.SrcRegData {
			return SetUpdate{Fields: fields[:i], Set: ds.SetName, Timeout: ds.Timeout, DataFields: fields[i:]}, true
		}
		w += codecKeyWords(fam, []Field{f})
	}
	return SetUpdate{}, false
}

// decodeUpdateDataFields matches what follows the key loads of "update @m { <key fields> :
// <data fields> }" when the key does not end on a 16-byte register: the data loads from the
// next one, then the dynset reading them.
func decodeUpdateDataFields(fam Family, key []Field, raws []decodeRaw) (SetUpdate, int) {
	w := codecKeyWords(fam, key)
	w += (4 - w%4) % 4
	data, n := decodeLoadsFrom(fam, raws, w)
	if len(data) == 0 || n >= len(raws) {
		return SetUpdate{}, 0
	}
	ds, ok := raws[n].e.(*expr.Dynset)
	if !ok || ds.SrcRegKey != 1 || ds.SrcRegData != codecReg(w) || ds.Operation != unix.NFT_DYNSET_OP_UPDATE || ds.Invert || len(ds.Exprs) != 0 {
		return SetUpdate{}, 0
	}
	return SetUpdate{Fields: key, Set: ds.SetName, Timeout: ds.Timeout, DataFields: data}, n + 1
}
