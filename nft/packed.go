package nft

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Packed is an element in a compact binary form: one string, a tenth of the memory of an
// Element with its key and data (bench/README.md, "Memory: peak resident set"). The reconciler
// keeps every desired and applied element in this form, a full sync's hundreds of thousands of
// them, and hands them to a Transaction as they are: *Packed is an Object like *Element, and
// every consumer of a Transaction (the kernel's encoder, the Fake, the renderer) reads it
// through Unpack, the encoder into a reused scratch Element, so a packed element is never
// expanded on the heap on the hot path.
//
// The string starts with the element's identity, ID: the set's name, a NUL, the key's values
// and, for an interval element whose end differs from its key, an end tag and the end's
// values. Two elements of one set have the same ID exactly when the kernel would hold them as
// the same element (an end equal to the key is the same element as no end, and is packed as
// none: the encoder sends the key as the end of an interval element without one). After the ID
// come the data values, the verdict, the comment and the timeout, each behind a tag of its own.
// Every value is self-delimited by a tag that also says its type, so unpacking needs no set
// definition, and two packings are equal exactly when the elements are.
type Packed struct {
	s   string
	id  uint32 // the length of the ID prefix of s
	set uint16 // the length of the set's name, which s starts with (in the padding after id)
}

// The tags of a packing. A value's tag carries its type in the low four bits and its form in
// the high ones; section tags are above every value tag.
const (
	packNum      = 0x10 // then the value's Num as a uvarint
	packNoAddr   = 0x20 // an address type holding no valid address: nothing follows
	packAddr4    = 0x40 // then 4 bytes
	packAddr16   = 0x60 // then 16 bytes
	packFormMask = 0xf0

	packEnd     = 0x80 // the interval end's values follow
	packData    = 0x81 // the data values follow
	packVerdict = 0x82 // then the kind, then the chain's length as a uvarint and its bytes
	packComment = 0x83 // then its length as a uvarint and its bytes
	packTimeout = 0x84 // then the timeout in nanoseconds as a uvarint
)

// Pack returns e in packed form.
func Pack(e *Element) Packed {
	var buf [128]byte
	b, id := AppendPacked(buf[:0], e)
	return PackedFrom(b, id)
}

// AppendPacked appends e's packing to b and returns it with the length of its ID, so a caller
// can look an element up, or compare it with a packed one, in a reused buffer without
// allocating: string(b[len(b0):len(b0)+id]) as a map key does not allocate.
func AppendPacked(b []byte, e *Element) (out []byte, id int) {
	start := len(b)
	b = AppendID(b, e)
	id = len(b) - start
	if len(e.Data) > 0 {
		b = appendPackedValues(append(b, packData), e.Data)
	}
	if v := e.Verdict; v != nil {
		b = append(b, packVerdict, byte(v.Kind))
		b = append(binary.AppendUvarint(b, uint64(len(v.Chain))), v.Chain...)
	}
	if e.Comment != "" {
		b = append(binary.AppendUvarint(append(b, packComment), uint64(len(e.Comment))), e.Comment...)
	}
	if e.Timeout != 0 {
		b = binary.AppendUvarint(append(b, packTimeout), uint64(e.Timeout))
	}
	return b, id
}

// AppendID appends e's identity (the ID of its packing, see Packed) to b.
func AppendID(b []byte, e *Element) []byte {
	b = append(append(b, e.Set...), 0)
	b = appendPackedValues(b, e.Key)
	if e.KeyEnd != nil && !slices.Equal(e.Key, e.KeyEnd) {
		b = appendPackedValues(append(b, packEnd), e.KeyEnd)
	}
	return b
}

func appendPackedValues(b []byte, vs []Value) []byte {
	for _, v := range vs {
		t := byte(v.Type) & 0x0f
		switch {
		case v.Type != TypeIPv4Addr && v.Type != TypeIPv6Addr:
			b = binary.AppendUvarint(append(b, packNum|t), uint64(v.Num))
		case !v.Addr.IsValid():
			b = append(b, packNoAddr|t)
		case v.Addr.Is4():
			a := v.Addr.As4()
			b = append(append(b, packAddr4|t), a[:]...)
		default:
			a := v.Addr.As16()
			b = append(append(b, packAddr16|t), a[:]...)
		}
	}
	return b
}

// PackedFrom makes a Packed of a packing and its ID's length as AppendPacked returned them
// (copying b), so a caller that packed into a reused buffer to look an element up keeps it
// without packing it again.
func PackedFrom(b []byte, id int) Packed { return packedOf(string(b), uint32(id)) }

func packedOf(s string, id uint32) Packed {
	return Packed{s: s, id: id, set: uint16(strings.IndexByte(s, 0))}
}

// ID is the element's identity within its table (see Packed): a map key.
func (p *Packed) ID() string { return p.s[:p.id] }

// String is the whole packing: two elements are the same exactly when their packings are.
func (p *Packed) String() string { return p.s }

// Set returns the name of the element's set.
func (p *Packed) Set() string { return p.s[:p.set] }

// Unpack returns the element in its own memory.
func (p *Packed) Unpack() Element {
	var e Element
	p.unpack(&e, nil, nil)
	return e
}

// UnpackInto fills e with the element, its values in vals (reused: pass what the last call
// returned) and its verdict in v, and returns the values' storage. e's strings share the
// packing's bytes; e stays valid until vals or v are reused.
func (p *Packed) UnpackInto(e *Element, vals []Value, v *Verdict) []Value {
	return p.unpack(e, vals[:0], v)
}

func (p *Packed) unpack(e *Element, vals []Value, v *Verdict) []Value {
	s := p.s
	*e = Element{Set: p.Set()}
	i := int(p.set) + 1
	mark := len(vals)
	vals, i = unpackValues(s, i, vals)
	if len(vals) > mark {
		e.Key = vals[mark:len(vals):len(vals)]
	}
	if i < len(s) && s[i] == packEnd {
		mark = len(vals)
		vals, i = unpackValues(s, i+1, vals)
		e.KeyEnd = vals[mark:len(vals):len(vals)]
	}
	if i < len(s) && s[i] == packData {
		mark = len(vals)
		vals, i = unpackValues(s, i+1, vals)
		e.Data = vals[mark:len(vals):len(vals)]
	}
	// The slices above point into vals as it was when each was cut; when vals grew past its
	// capacity later, the earlier ones still point at the old array, which holds their values.
	if i < len(s) && s[i] == packVerdict {
		kind := VerdictKind(s[i+1])
		n, w := uvarintAt(s, i+2)
		i += 2 + w
		chain := s[i : i+int(n)]
		i += int(n)
		if v == nil {
			v = new(Verdict)
		}
		*v = Verdict{Kind: kind, Chain: chain}
		e.Verdict = v
	}
	if i < len(s) && s[i] == packComment {
		n, w := uvarintAt(s, i+1)
		i += 1 + w
		e.Comment = s[i : i+int(n)]
		i += int(n)
	}
	if i < len(s) && s[i] == packTimeout {
		n, w := uvarintAt(s, i+1)
		i += 1 + w
		e.Timeout = time.Duration(n)
	}
	if i != len(s) {
		panic(fmt.Sprintf("nft: corrupt packed element %q at byte %d", s, i))
	}
	return vals
}

// unpackValues appends the values from s[i:] up to the first section tag (or the end).
func unpackValues(s string, i int, vals []Value) ([]Value, int) {
	for i < len(s) && s[i] < packEnd {
		tag := s[i]
		t := Type(tag & 0x0f)
		i++
		switch tag & packFormMask {
		case packNum:
			n, w := uvarintAt(s, i)
			vals = append(vals, Value{Type: t, Num: uint32(n)})
			i += w
		case packNoAddr:
			vals = append(vals, Value{Type: t})
		case packAddr4:
			var a [4]byte
			copy(a[:], s[i:i+4])
			vals = append(vals, Value{Type: t, Addr: netip.AddrFrom4(a)})
			i += 4
		case packAddr16:
			var a [16]byte
			copy(a[:], s[i:i+16])
			vals = append(vals, Value{Type: t, Addr: netip.AddrFrom16(a)})
			i += 16
		default:
			panic(fmt.Sprintf("nft: corrupt packed element %q: tag %#x at byte %d", s, tag, i-1))
		}
	}
	return vals, i
}

// uvarintAt decodes the uvarint at s[i:] and returns it with its length.
func uvarintAt(s string, i int) (uint64, int) {
	var x uint64
	for n := 0; i+n < len(s) && n < binary.MaxVarintLen64; n++ {
		c := s[i+n]
		x |= uint64(c&0x7f) << (7 * n)
		if c < 0x80 {
			return x, n + 1
		}
	}
	panic(fmt.Sprintf("nft: corrupt packed element %q: no varint at byte %d", s, i))
}

func (*Packed) objectKind() string { return "element" }

// elementScratch turns an Op's element object into an *Element without allocating: a *Packed
// is unpacked into the scratch, which stays valid until the next call.
type elementScratch struct {
	e    Element
	vals []Value
	v    Verdict
}

// of returns o's element, or nil when o is no element.
func (sc *elementScratch) of(o Object) *Element {
	switch e := o.(type) {
	case *Element:
		return e
	case *Packed:
		sc.vals = e.UnpackInto(&sc.e, sc.vals, &sc.v)
		return &sc.e
	}
	return nil
}

// PackedDumper is a kernel that reads a table back with its elements packed and handed one by
// one to the reader (DumpPacked; Ruleset.Elements is then nil): the Kernel and the Fake. A
// reader that keeps elements packed anyway (the reconciler) asks for them so when its Interface
// offers it.
type PackedDumper interface {
	DumpPacked(ctx context.Context, t Table, each func(Packed)) (*Ruleset, error)
}
