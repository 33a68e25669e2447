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

// attr appends one attribute with its padding.
func (w *nlBuf) attr(typ uint16, data []byte) {
	n := nlAttrHdrLen + len(data)
	var h [nlAttrHdrLen]byte
	binary.NativeEndian.PutUint16(h[0:2], uint16(n))
	binary.NativeEndian.PutUint16(h[2:4], typ)
	w.b = append(w.b, h[:]...)
	w.b = append(w.b, data...)
	for i := n; i < nlAlign(n); i++ {
		w.b = append(w.b, 0)
	}
}

func (w *nlBuf) str(typ uint16, s string) {
	w.attr(typ, append([]byte(s), 0))
}

func (w *nlBuf) u32(typ uint16, v uint32) {
	w.attr(typ, binary.BigEndian.AppendUint32(nil, v))
}

func (w *nlBuf) u64(typ uint16, v uint64) {
	w.attr(typ, binary.BigEndian.AppendUint64(nil, v))
}

// nest starts a nested attribute and returns its offset for endNest.
func (w *nlBuf) nest(typ uint16) int {
	off := len(w.b)
	var h [nlAttrHdrLen]byte
	binary.NativeEndian.PutUint16(h[2:4], typ|nlAttrNested)
	w.b = append(w.b, h[:]...)
	return off
}

// endNest writes the length of the nested attribute at off. Callers keep nests below 64 KiB
// (element lists are chunked), so the uint16 length can never overflow.
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

func nlStr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
