package nft

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// This file decodes a set's elements as the kernel dumps them. A restart reads back every
// element of the table (350k at 10k Services × 10 endpoints), so the decoder walks the
// attributes in place, allocates keys and values from shared slabs, shares the strings that
// repeat (verdict chains) and copies nothing it does not keep: the dump's bytes live only until
// the next read.

// decodeSlab is how many Values one slab holds: 160 KiB, filled by ~700 elements.
const decodeSlab = 4096

// decodeElems accumulates the elements of one set across the messages of its dump.
type decodeElems struct {
	set     *Set
	bigHost bool
	// the elements decoded so far, in chunks: a slice grown by append would allocate about four
	// times its final size on the way (large slices grow by a quarter)
	chunks [][]Element
	n      int
	// single-field interval sets: raw start/end elements, reassembled once all are read
	raws  []decodeRawElem
	arena []byte // their keys, copied out of the receive buffer
	// slabs of values and verdicts the elements' slices and pointers point into
	vals     []Value
	verdicts []Verdict
	chains   map[string]string // verdict chain names, shared by every element naming them
	// pack (DumpPacked) packs each element as soon as it is decoded, into packs (the packings
	// back to back) and ends (where each ends, and its ID's length): the values and verdict
	// slabs are then reused by the next element, and nothing per element is allocated. Every
	// decodePackChunk bytes the packings become one string that they share (flush), so the
	// buffer is reused rather than grown to the whole set's size and copied once more.
	pack  bool
	packs []byte
	ends  []decodePackEnd
	pipe  *dumpPipe // takes the packed elements, a batch per flush
}

// decodePackChunk is how many bytes of packings share one string.
const decodePackChunk = 64 << 10

// flush turns the packings in d.packs into Packeds sharing one string, handed on as one batch.
// It waits while the pipe is full: the caller's goroutine empties it until every socket's
// goroutine is done (dumpContents), so it cannot wait forever.
func (d *decodeElems) flush() {
	if len(d.ends) == 0 {
		return
	}
	chunk := string(d.packs)
	b := d.pipe.batch(len(d.ends))
	start := uint32(0)
	for _, e := range d.ends {
		b = append(b, packedOf(chunk[start:e.end], e.id))
		start = e.end
	}
	d.packs, d.ends = d.packs[:0], d.ends[:0]
	d.pipe.full <- b
}

// decodePackEnd is where one packed element ends in decodeElems.packs, and its ID's length.
type decodePackEnd struct{ end, id uint32 }

// decodeRawElem is one element of a single-field interval set before reassembly: its key is
// arena[key:key+keyLen].
type decodeRawElem struct {
	key, keyLen int
	flags       uint32
	el          Element
}

func (k *Kernel) dumpElements(ctx context.Context, c *nlConn, t Table, s *Set, chains map[string]string) ([]Element, error) {
	d := &decodeElems{set: s, bigHost: codecHostToBig(s.Interval), chains: chains}
	if err := k.decodeElements(ctx, c, t, d); err != nil {
		return nil, err
	}
	return d.sorted(), nil
}

// dumpPacked reads back the elements of set s packed, in the kernel's order, into pipe.
func (k *Kernel) dumpPacked(ctx context.Context, c *nlConn, t Table, s *Set, chains map[string]string, pipe *dumpPipe) error {
	d := &decodeElems{set: s, bigHost: codecHostToBig(s.Interval), chains: chains, pack: true, pipe: pipe}
	if err := k.decodeElements(ctx, c, t, d); err != nil {
		return err
	}
	d.flush()
	return nil
}

// decodeElements reads the elements of d's set into d, from socket c.
func (k *Kernel) decodeElements(ctx context.Context, c *nlConn, t Table, d *decodeElems) error {
	s := d.set
	err := c.dump(ctx, unix.NFT_MSG_GETSETELEM, t.Family, func(w *nlBuf) {
		w.str(unix.NFTA_SET_ELEM_LIST_TABLE, t.Name)
		w.str(unix.NFTA_SET_ELEM_LIST_SET, s.Name)
	}, func(m nlMsg) error {
		if len(m.data) < nlNfgenLen {
			return nil
		}
		for it := nlIter(m.data[nlNfgenLen:]); it.next(); {
			if it.typ != unix.NFTA_SET_ELEM_LIST_ELEMENTS {
				continue
			}
			for el := nlIter(it.data); el.next(); {
				if err := d.add(el.data); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if s.Interval && len(s.Key) == 1 {
		return d.joinIntervals()
	}
	return nil
}

// decodeChunk is the number of elements of a staging chunk (480 KiB).
const decodeChunk = 4096

func (d *decodeElems) push(el Element) {
	if d.pack {
		if len(d.packs) >= decodePackChunk {
			d.flush()
		}
		var id int
		d.packs, id = AppendPacked(d.packs, &el)
		d.ends = append(d.ends, decodePackEnd{end: uint32(len(d.packs)), id: uint32(id)})
		if len(d.raws) == 0 {
			// el is packed: the slabs are free for the next element. Not while interval
			// elements wait to be joined: their data values and verdicts are in the slabs.
			d.vals, d.verdicts = d.vals[:0], d.verdicts[:0]
		}
		d.n++
		return
	}
	if len(d.chunks) == 0 || len(d.chunks[len(d.chunks)-1]) == decodeChunk {
		d.chunks = append(d.chunks, make([]Element, 0, decodeChunk))
	}
	c := &d.chunks[len(d.chunks)-1]
	*c = append(*c, el)
	d.n++
}

// sorted returns the elements in CompareKeys order, in one slice of their exact number. It sorts
// each key's fields written big-endian and unpadded (bytewise order is then CompareKeys order:
// the fields of one set have one type each, addresses compare as big-endian numbers) through a
// permutation, instead of moving 120-byte Elements through a comparator of Values.
func (d *decodeElems) sorted() []Element {
	if d.n == 0 {
		return nil
	}
	kl := 0
	for _, t := range d.set.Key {
		ti, _ := codecType(t)
		kl += ti.len
	}
	keys := make([]byte, 0, d.n*kl)
	for _, c := range d.chunks {
		for i := range c {
			keys = decodeSortKey(keys, c[i].Key)
		}
	}
	perm := make([]int32, d.n)
	for i := range perm {
		perm[i] = int32(i)
	}
	if len(keys) == d.n*kl {
		slices.SortFunc(perm, func(a, b int32) int {
			return bytes.Compare(keys[int(a)*kl:int(a+1)*kl], keys[int(b)*kl:int(b+1)*kl])
		})
	} else { // a key of another length: not the set's types, compare the values themselves
		at := func(i int32) *Element { return &d.chunks[i/decodeChunk][i%decodeChunk] }
		slices.SortFunc(perm, func(a, b int32) int { return CompareKeys(at(a).Key, at(b).Key) })
	}
	out := make([]Element, d.n)
	for i, p := range perm {
		out[i] = d.chunks[p/decodeChunk][p%decodeChunk]
	}
	d.chunks = nil
	return out
}

// decodeSortKey appends key's fields big-endian without padding.
func decodeSortKey(b []byte, key []Value) []byte {
	for _, v := range key {
		switch v.Type {
		case TypeIPv4Addr, TypeIPv6Addr:
			if v.Addr.Is4() {
				a := v.Addr.As4()
				b = append(b, a[:]...)
			} else if v.Addr.Is6() {
				a := v.Addr.As16()
				b = append(b, a[:]...)
			}
		case TypeInetProto:
			b = append(b, byte(v.Num))
		case TypeInetService:
			b = binary.BigEndian.AppendUint16(b, uint16(v.Num))
		default:
			b = binary.BigEndian.AppendUint32(b, v.Num)
		}
	}
	return b
}

// values returns n zeroed Values from the slab, capped so that an append by the caller copies.
func (d *decodeElems) values(n int) []Value {
	if len(d.vals)+n > cap(d.vals) {
		d.vals = make([]Value, 0, max(decodeSlab, n))
	}
	l := len(d.vals)
	d.vals = d.vals[:l+n]
	return d.vals[l : l+n : l+n]
}

func (d *decodeElems) verdict(v Verdict) *Verdict {
	if len(d.verdicts) == cap(d.verdicts) {
		d.verdicts = make([]Verdict, 0, decodeSlab/4)
	}
	d.verdicts = append(d.verdicts, v)
	return &d.verdicts[len(d.verdicts)-1]
}

// chain returns the chain name in b as a string shared with every other element naming it.
func (d *decodeElems) chain(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i] // as nlStr: the name ends at its NUL
	}
	if s, ok := d.chains[string(b)]; ok {
		return s
	}
	s := string(b)
	d.chains[s] = s
	return s
}

// decodeKeyInto decodes b, encoded as types ts, into vals (len(ts) of them).
func decodeKeyInto(vals []Value, b []byte, ts []Type, bigHost bool) error {
	for i, t := range ts {
		ti, err := codecType(t)
		if err != nil {
			return err
		}
		if len(b) < ti.len {
			return fmt.Errorf("field %d (%v): %d bytes left, need %d", i, t, len(b), ti.len)
		}
		f := b[:ti.len]
		v := Value{Type: t}
		switch t {
		case TypeIPv4Addr:
			v.Addr = netip.AddrFrom4([4]byte(f))
		case TypeIPv6Addr:
			v.Addr = netip.AddrFrom16([16]byte(f))
		case TypeInetProto:
			v.Num = uint32(f[0])
		case TypeInetService:
			v.Num = uint32(binary.BigEndian.Uint16(f))
		case TypeMark, TypeInteger:
			if bigHost {
				v.Num = binary.BigEndian.Uint32(f)
			} else {
				v.Num = binary.NativeEndian.Uint32(f)
			}
		}
		vals[i] = v
		step := ti.len
		if len(ts) > 1 {
			step = codecPad4(ti.len)
		}
		b = b[min(step, len(b)):]
	}
	return nil
}

func (d *decodeElems) key(b []byte) ([]Value, error) {
	vals := d.values(len(d.set.Key))
	if err := decodeKeyInto(vals, b, d.set.Key, d.bigHost); err != nil {
		return nil, fmt.Errorf("element key %x: %w", b, err)
	}
	return vals, nil
}

// nlNestedValue returns NFTA_DATA_VALUE inside a nested data attribute.
func nlNestedValue(b []byte) []byte {
	for it := nlIter(b); it.next(); {
		if it.typ == unix.NFTA_DATA_VALUE {
			return it.data
		}
	}
	return nil
}

// add decodes one NFTA_LIST_ELEM.
func (d *decodeElems) add(b []byte) error {
	s := d.set
	el := Element{Set: s.Name}
	var key, keyEnd []byte
	var flags uint32
	for it := nlIter(b); it.next(); {
		switch it.typ {
		case unix.NFTA_SET_ELEM_KEY:
			key = nlNestedValue(it.data)
		case codecSetElemKeyEnd:
			keyEnd = nlNestedValue(it.data)
		case unix.NFTA_SET_ELEM_FLAGS:
			flags = nlU32(it.data)
		case unix.NFTA_SET_ELEM_DATA:
			if err := d.data(&el, it.data); err != nil {
				return err
			}
		case unix.NFTA_SET_ELEM_TIMEOUT:
			if to := time.Duration(nlU64(it.data)) * time.Millisecond; to != s.Timeout {
				el.Timeout = to
			}
		case unix.NFTA_SET_ELEM_USERDATA:
			el.Comment = decodeUdataString(decodeUdataFind(it.data, codecUdataElemComment))
		}
	}
	if s.Interval && len(s.Key) == 1 {
		// Kept raw until every start and end element is in: copy the key out of the buffer.
		r := decodeRawElem{key: len(d.arena), keyLen: len(key), flags: flags, el: el}
		d.arena = append(d.arena, key...)
		d.raws = append(d.raws, r)
		return nil
	}
	var err error
	if el.Key, err = d.key(key); err != nil {
		return err
	}
	if s.Interval && keyEnd != nil {
		if el.KeyEnd, err = d.key(keyEnd); err != nil {
			return fmt.Errorf("element key end %x: %w", keyEnd, err)
		}
	}
	d.push(el)
	return nil
}

// data decodes NFTA_SET_ELEM_DATA: a verdict, or a map's value.
func (d *decodeElems) data(el *Element, b []byte) error {
	for it := nlIter(b); it.next(); {
		switch it.typ {
		case unix.NFTA_DATA_VERDICT:
			var code int32
			var chain []byte
			for v := nlIter(it.data); v.next(); {
				switch v.typ {
				case unix.NFTA_VERDICT_CODE:
					code = int32(nlU32(v.data))
				case unix.NFTA_VERDICT_CHAIN:
					chain = v.data
				}
			}
			name := ""
			if code == unix.NFT_JUMP || code == unix.NFT_GOTO {
				name = d.chain(chain)
			}
			vd, err := decodeVerdictCode(code, name)
			if err != nil {
				return err
			}
			el.Verdict = d.verdict(vd)
			return nil
		case unix.NFTA_DATA_VALUE:
			if !d.set.IsMap() {
				continue
			}
			vals := d.values(len(d.set.Data))
			if err := decodeKeyInto(vals, it.data, d.set.Data, false); err != nil {
				return fmt.Errorf("element data %x: %w", it.data, err)
			}
			el.Data = vals
		}
	}
	return nil
}

// joinIntervals turns a single-field interval set's start and INTERVAL_END elements back into
// ranges with inclusive ends: each start runs to the key before the next end element, or to
// the top of the key space if none follows.
func (d *decodeElems) joinIntervals() error {
	raws := d.raws
	keyOf := func(r *decodeRawElem) []byte { return d.arena[r.key : r.key+r.keyLen] }
	slices.SortStableFunc(raws, func(a, b decodeRawElem) int { return bytes.Compare(keyOf(&a), keyOf(&b)) })
	for i := 0; i < len(raws); i++ {
		r := &raws[i]
		if r.flags&codecElemIntervalEnd != 0 {
			continue // an end without a start: nft's zero element, or a stray
		}
		key := keyOf(r)
		var end []byte
		if i+1 < len(raws) && raws[i+1].flags&codecElemIntervalEnd != 0 {
			end = codecDecrement(keyOf(&raws[i+1]))
			i++
		} else {
			end = bytes.Repeat([]byte{0xff}, len(key))
		}
		el := r.el
		var err error
		if el.Key, err = d.key(key); err != nil {
			return err
		}
		if el.KeyEnd, err = d.key(end); err != nil {
			return fmt.Errorf("element key end %x: %w", end, err)
		}
		d.push(el)
	}
	d.raws, d.arena = nil, nil
	return nil
}

// SetElementsDumper reads the elements of one set back without the rest of its table: what a
// caller that prunes the packet path's entries of a dynamic map needs, at the cost of that map
// alone.
type SetElementsDumper interface {
	DumpSetElements(ctx context.Context, t Table, set string) ([]Element, error)
}

// DumpSetElements reads back the elements of set in table t. A missing set is an error for
// which IsNotFound is true.
func (k *Kernel) DumpSetElements(ctx context.Context, t Table, set string) ([]Element, error) {
	sets, err := k.kernelSetsOf(ctx, t, false)
	if err != nil {
		return nil, err
	}
	s, ok := sets[set]
	if !ok {
		if sets, err = k.kernelSetsOf(ctx, t, true); err != nil {
			return nil, err
		}
		if s, ok = sets[set]; !ok {
			return nil, fmt.Errorf("dump set %s of table %s: %w", set, t, unix.ENOENT)
		}
	}
	els, err := k.dumpElements(ctx, k.conn, t, &s, map[string]string{})
	if err != nil {
		return nil, fmt.Errorf("dump set %s of table %s: %w", set, t, err)
	}
	return els, nil
}
