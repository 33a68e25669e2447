package nft

import (
	"encoding/binary"
)

// nlBuf appends netlink messages and attributes to one growing buffer: the whole batch is built
// in place, so element offsets inside a message are known (the kernel's extended ACK points at
// the failing element by offset) and nothing is copied twice.
type nlBuf struct {
	b []byte
}

const (
	nlMsgHdrLen   = 16
	nlNfgenLen    = 4
	nlAttrHdrLen  = 4
	nlAttrNested  = 0x8000 // NLA_F_NESTED
	nlAttrTypeMsk = 0x3fff
)

func nlAlign(n int) int { return (n + 3) &^ 3 }

// beginMsg starts a netlink message with an nfgenmsg header and returns its offset.
func (w *nlBuf) beginMsg(typ, flags uint16, seq uint32, family uint8, resID uint16) int {
	off := len(w.b)
	var h [nlMsgHdrLen + nlNfgenLen]byte
	binary.NativeEndian.PutUint16(h[4:6], typ)
	binary.NativeEndian.PutUint16(h[6:8], flags)
	binary.NativeEndian.PutUint32(h[8:12], seq)
	h[16] = family
	h[17] = 0 // NFNETLINK_V0
	binary.BigEndian.PutUint16(h[18:20], resID)
	w.b = append(w.b, h[:]...)
	return off
}

// endMsg writes the length of the message started at off.
func (w *nlBuf) endMsg(off int) {
	binary.NativeEndian.PutUint32(w.b[off:off+4], uint32(len(w.b)-off))
}

// nlZeros pads attributes; it is never written.
var nlZeros [4]byte

// hdr appends an attribute header of length n (header included).
func (w *nlBuf) hdr(typ uint16, n int) {
	w.b = binary.NativeEndian.AppendUint16(w.b, uint16(n))
	w.b = binary.NativeEndian.AppendUint16(w.b, typ)
}

// pad appends the zero bytes that align an attribute of length n.
func (w *nlBuf) pad(n int) { w.b = append(w.b, nlZeros[:nlAlign(n)-n]...) }

// attr appends one attribute with its padding.
func (w *nlBuf) attr(typ uint16, data []byte) {
	n := nlAttrHdrLen + len(data)
	w.hdr(typ, n)
	w.b = append(w.b, data...)
	w.pad(n)
}

// str appends a NUL-terminated string attribute.
func (w *nlBuf) str(typ uint16, s string) {
	n := nlAttrHdrLen + len(s) + 1
	w.hdr(typ, n)
	w.b = append(append(w.b, s...), 0)
	w.pad(n)
}

func (w *nlBuf) u32(typ uint16, v uint32) {
	w.hdr(typ, nlAttrHdrLen+4)
	w.b = binary.BigEndian.AppendUint32(w.b, v)
}

func (w *nlBuf) u64(typ uint16, v uint64) {
	w.hdr(typ, nlAttrHdrLen+8)
	w.b = binary.BigEndian.AppendUint64(w.b, v)
}

// open starts an attribute whose payload the caller appends to w.b in place (no intermediate
// slice); close writes its length and pads it.
func (w *nlBuf) open(typ uint16) int {
	off := len(w.b)
	w.hdr(typ, 0)
	return off
}

func (w *nlBuf) close(off int) {
	n := len(w.b) - off
	binary.NativeEndian.PutUint16(w.b[off:off+2], uint16(n))
	w.pad(n)
}

// nest starts a nested attribute and returns its offset for endNest.
func (w *nlBuf) nest(typ uint16) int { return w.open(typ | nlAttrNested) }

// endNest writes the length of the nested attribute at off. Callers keep nests below 64 KiB
// (element lists are chunked), so the uint16 length can never overflow. Nested attributes are
// whole attributes, so no padding is needed.
func (w *nlBuf) endNest(off int) {
	binary.NativeEndian.PutUint16(w.b[off:off+2], uint16(len(w.b)-off))
}

// nlAttr is one decoded attribute.
type nlAttr struct {
	typ  uint16
	data []byte
}

// nlParseAttrs splits b into attributes; malformed trailing bytes are ignored.
func nlParseAttrs(b []byte) []nlAttr {
	var out []nlAttr
	for len(b) >= nlAttrHdrLen {
		n := int(binary.NativeEndian.Uint16(b[0:2]))
		if n < nlAttrHdrLen || n > len(b) {
			break
		}
		out = append(out, nlAttr{typ: binary.NativeEndian.Uint16(b[2:4]) & nlAttrTypeMsk, data: b[nlAttrHdrLen:n]})
		a := nlAlign(n)
		if a > len(b) {
			a = len(b)
		}
		b = b[a:]
	}
	return out
}

// nlAttrIter walks the attributes of b without allocating: for it := nlIter(b); it.next(); {
// it.typ, it.data }. Malformed trailing bytes end the walk, as in nlParseAttrs.
type nlAttrIter struct {
	b    []byte
	typ  uint16
	data []byte
}

func nlIter(b []byte) nlAttrIter { return nlAttrIter{b: b} }

func (it *nlAttrIter) next() bool {
	if len(it.b) < nlAttrHdrLen {
		return false
	}
	n := int(binary.NativeEndian.Uint16(it.b[0:2]))
	if n < nlAttrHdrLen || n > len(it.b) {
		it.b = nil
		return false
	}
	it.typ = binary.NativeEndian.Uint16(it.b[2:4]) & nlAttrTypeMsk
	it.data = it.b[nlAttrHdrLen:n]
	a := nlAlign(n)
	if a > len(it.b) {
		a = len(it.b)
	}
	it.b = it.b[a:]
	return true
}

// nlAttrMap indexes attributes by type (the last one wins).
func nlAttrMap(b []byte) map[uint16][]byte {
	m := map[uint16][]byte{}
	for _, a := range nlParseAttrs(b) {
		m[a.typ] = a.data
	}
	return m
}

func nlU32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.BigEndian.Uint32(b)
}

func nlU64(b []byte) uint64 {
	if len(b) < 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

// nlCut is b up to its first NUL: a string attribute without its terminator, not copied.
func nlCut(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

func nlStr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
