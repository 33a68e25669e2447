package nft

import (
	"encoding/binary"
	"fmt"
	"net/netip"
)

// This file writes down, once, how model values become kernel bytes: nft datatype ids, field
// lengths, byte orders and concatenation padding. See README.md ("Byte order and padding").

// nft datatype ids (nft's enum datatypes); the kernel stores them opaquely in NFTA_SET_KEY_TYPE
// and NFTA_SET_DATA_TYPE, and nft uses them to print keys and values.
const (
	codecDTypeVerdict     = 1
	codecDTypeInteger     = 4
	codecDTypeIPv4Addr    = 7
	codecDTypeIPv6Addr    = 8
	codecDTypeInetProto   = 12
	codecDTypeInetService = 13
	codecDTypeMark        = 19

	// codecConcatBits is how many bits each field's datatype id takes in a concatenation's
	// combined id (nft: TYPE_BITS).
	codecConcatBits = 6
)

// Byte orders nft records in set userdata (enum byteorder).
const (
	codecByteOrderInvalid = 0
	codecByteOrderHost    = 1
	codecByteOrderBig     = 2
)

// codecTypeInfo describes one field type: its datatype id, its length in bytes and whether its
// value is stored in host byte order (mark, integer) rather than network order.
type codecTypeInfo struct {
	id   uint32
	len  int
	host bool
}

func codecType(t Type) (codecTypeInfo, error) {
	switch t {
	case TypeIPv4Addr:
		return codecTypeInfo{codecDTypeIPv4Addr, 4, false}, nil
	case TypeIPv6Addr:
		return codecTypeInfo{codecDTypeIPv6Addr, 16, false}, nil
	case TypeInetProto:
		return codecTypeInfo{codecDTypeInetProto, 1, false}, nil
	case TypeInetService:
		return codecTypeInfo{codecDTypeInetService, 2, false}, nil
	case TypeMark:
		return codecTypeInfo{codecDTypeMark, 4, true}, nil
	case TypeInteger:
		return codecTypeInfo{codecDTypeInteger, 4, true}, nil
	case TypeVerdict:
		return codecTypeInfo{codecDTypeVerdict, 0, false}, nil
	}
	return codecTypeInfo{}, fmt.Errorf("unsupported field type %v: use one of the Type constants", t)
}

func codecTypeFromID(id uint32) Type {
	switch id {
	case codecDTypeIPv4Addr:
		return TypeIPv4Addr
	case codecDTypeIPv6Addr:
		return TypeIPv6Addr
	case codecDTypeInetProto:
		return TypeInetProto
	case codecDTypeInetService:
		return TypeInetService
	case codecDTypeMark:
		return TypeMark
	case codecDTypeInteger:
		return TypeInteger
	case codecDTypeVerdict:
		return TypeVerdict
	}
	return TypeInvalid
}

// codecPad4 rounds n up to a multiple of 4: every field of a concatenation occupies whole 32-bit
// registers, so each is padded with zero bytes to 4 bytes.
func codecPad4(n int) int { return (n + 3) &^ 3 }

// codecTypesID combines the field datatype ids of a key or value: one field is its own id; a
// concatenation shifts each field's id in by codecConcatBits, first field highest.
func codecTypesID(ts []Type) (uint32, error) {
	var id uint32
	for _, t := range ts {
		ti, err := codecType(t)
		if err != nil {
			return 0, err
		}
		id = id<<codecConcatBits | ti.id
	}
	return id, nil
}

// codecTypesFromID splits a combined datatype id back into fields, given their number (known from
// NFTA_SET_DESC_CONCAT or the key length).
func codecTypesFromID(id uint32, n int) []Type {
	ts := make([]Type, n)
	for i := n - 1; i >= 0; i-- {
		ts[i] = codecTypeFromID(id & (1<<codecConcatBits - 1))
		id >>= codecConcatBits
	}
	return ts
}

// codecTypesLen is the length of a key or value: one field is its own length, a concatenation
// the sum of its fields each padded to 4 bytes.
func codecTypesLen(ts []Type) (int, error) {
	if len(ts) == 1 {
		ti, err := codecType(ts[0])
		return ti.len, err
	}
	n := 0
	for _, t := range ts {
		ti, err := codecType(t)
		if err != nil {
			return 0, err
		}
		n += codecPad4(ti.len)
	}
	return n, nil
}

// codecHostToBig reports whether host-order fields (mark, integer) must be stored big-endian:
// nft does so in interval sets, whose backends compare keys bytewise, and converts the register
// with a byteorder expression before the lookup.
func codecHostToBig(interval bool) bool { return interval }

// codecAppendValue appends one field's bytes. bigHost stores host-order types big-endian.
func codecAppendValue(b []byte, v Value, want Type, bigHost bool) ([]byte, error) {
	if v.Type != want {
		return nil, fmt.Errorf("value of type %v where the set expects %v", v.Type, want)
	}
	switch v.Type {
	case TypeIPv4Addr:
		if !v.Addr.Is4() {
			return nil, fmt.Errorf("ipv4_addr value %v is not an IPv4 address", v.Addr)
		}
		a := v.Addr.As4()
		return append(b, a[:]...), nil
	case TypeIPv6Addr:
		if !v.Addr.Is6() || v.Addr.Is4In6() {
			return nil, fmt.Errorf("ipv6_addr value %v is not an IPv6 address", v.Addr)
		}
		a := v.Addr.As16()
		return append(b, a[:]...), nil
	case TypeInetProto:
		if v.Num > 255 {
			return nil, fmt.Errorf("inet_proto value %d does not fit one byte", v.Num)
		}
		return append(b, byte(v.Num)), nil
	case TypeInetService:
		if v.Num > 65535 {
			return nil, fmt.Errorf("inet_service value %d is not a port", v.Num)
		}
		return binary.BigEndian.AppendUint16(b, uint16(v.Num)), nil
	case TypeMark, TypeInteger:
		if bigHost {
			return binary.BigEndian.AppendUint32(b, v.Num), nil
		}
		return binary.NativeEndian.AppendUint32(b, v.Num), nil
	}
	return nil, fmt.Errorf("cannot encode a value of type %v", v.Type)
}

// codecEncodeKey appends to dst the encoding of a key or map value of types ts. A concatenation
// pads each field to 4 bytes. Callers pass a reused buffer, so a key costs no allocation.
func codecEncodeKey(dst []byte, vals []Value, ts []Type, bigHost bool) ([]byte, error) {
	if len(vals) != len(ts) {
		return nil, fmt.Errorf("%d fields where the set's type has %d (%v)", len(vals), len(ts), ts)
	}
	start := len(dst)
	for i, v := range vals {
		var err error
		if dst, err = codecAppendValue(dst, v, ts[i], bigHost); err != nil {
			return nil, fmt.Errorf("field %d: %w", i, err)
		}
		if len(ts) > 1 {
			dst = append(dst, nlZeros[:codecPad4(len(dst)-start)-(len(dst)-start)]...)
		}
	}
	return dst, nil
}

// codecDecodeKey is the inverse of codecEncodeKey.
func codecDecodeKey(b []byte, ts []Type, bigHost bool) ([]Value, error) {
	vals := make([]Value, 0, len(ts))
	for i, t := range ts {
		ti, err := codecType(t)
		if err != nil {
			return nil, err
		}
		if len(b) < ti.len {
			return nil, fmt.Errorf("field %d (%v): %d bytes left, need %d", i, t, len(b), ti.len)
		}
		f := b[:ti.len]
		var v Value
		switch t {
		case TypeIPv4Addr, TypeIPv6Addr:
			a, _ := netip.AddrFromSlice(f)
			v = Value{Type: t, Addr: a}
		case TypeInetProto:
			v = Value{Type: t, Num: uint32(f[0])}
		case TypeInetService:
			v = Value{Type: t, Num: uint32(binary.BigEndian.Uint16(f))}
		case TypeMark, TypeInteger:
			if bigHost {
				v = Value{Type: t, Num: binary.BigEndian.Uint32(f)}
			} else {
				v = Value{Type: t, Num: binary.NativeEndian.Uint32(f)}
			}
		}
		vals = append(vals, v)
		step := ti.len
		if len(ts) > 1 {
			step = codecPad4(ti.len)
		}
		if step > len(b) {
			step = len(b)
		}
		b = b[step:]
	}
	return vals, nil
}

// codecKeyByteOrder is the byte order nft records in set userdata for a key or value: that of a
// single field, none (invalid) for a concatenation.
func codecKeyByteOrder(ts []Type, interval bool) uint32 {
	if len(ts) != 1 {
		return codecByteOrderInvalid
	}
	ti, err := codecType(ts[0])
	if err != nil || ti.len == 0 {
		return codecByteOrderInvalid
	}
	if ti.host && !codecHostToBig(interval) {
		return codecByteOrderHost
	}
	return codecByteOrderBig
}

// codecIncrement appends to dst b+1 as a big-endian number of the same length, and returns false
// if b was all ones (no successor). Single-field interval sets end a range at the first key
// after it.
func codecIncrement(dst, b []byte) ([]byte, bool) {
	start := len(dst)
	dst = append(dst, b...)
	out := dst[start:]
	for i := len(out) - 1; i >= 0; i-- {
		out[i]++
		if out[i] != 0 {
			return dst, true
		}
	}
	return dst[:start], false
}

// codecDecrement returns b-1 (big-endian); b must not be all zeros.
func codecDecrement(b []byte) []byte {
	out := append([]byte(nil), b...)
	for i := len(out) - 1; i >= 0; i-- {
		out[i]--
		if out[i] != 0xff {
			break
		}
	}
	return out
}
