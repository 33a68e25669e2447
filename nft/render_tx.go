package nft

import (
	"fmt"
	"strings"
)

// RenderTransaction writes tx as an `nft -f` script: one command per op, in the op order Apply
// sends, each naming its own table (`add element ip nftproxy endpoints { 198.19.0.10 . tcp . 80
// . 0 : 198.18.128.11 . 8080 }`). It lets a reader see exactly what a sync sent, lets a test
// compare the ops of a sync with a golden text, and `nft -f` of it makes the same change as
// Apply (proven in proxy/reconciler's kernel tests). Values, expressions, set types and names
// are written by the same code as Render, so what nft cannot read fails loudly here too.
//
// A delete names only what the kernel looks up: an element by its key (and interval end), a
// rule by its handle, a chain, set or table by its name. A Flush or Delete of a map carrying
// only the map's name is written `set` unless the map was added earlier in tx: nft refuses
// `flush set` on a map, so callers flushing a map pass its Data.
func RenderTransaction(tx *Transaction) string {
	if tx == nil {
		return ""
	}
	maps := map[Table]map[string]bool{}
	var b strings.Builder
	for _, op := range tx.All() {
		if s, ok := op.Object.(*Set); ok && op.Verb == VerbAdd && s.IsMap() {
			if maps[op.Table] == nil {
				maps[op.Table] = map[string]bool{}
			}
			maps[op.Table][s.Name] = true
		}
		b.WriteString(renderOp(op, maps[op.Table]))
		b.WriteByte('\n')
	}
	return b.String()
}

// String returns tx as an nft script (RenderTransaction).
func (tx *Transaction) String() string { return RenderTransaction(tx) }

func renderOp(op Op, maps map[string]bool) string {
	t := op.Table.Family.String() + " " + renderName(op.Table.Name)
	verb := op.Verb.String()
	if op.Verb != VerbAdd && op.Verb != VerbDelete && op.Verb != VerbFlush {
		return renderLoud("bad-verb", verb)
	}
	if p, ok := op.Object.(*Packed); ok {
		e := p.Unpack()
		op.Object = &e
	}
	switch o := op.Object.(type) {
	case *TableObj:
		return verb + " table " + t
	case *Chain:
		out := verb + " chain " + t + " " + renderName(o.Name)
		if op.Verb == VerbAdd && o.Base != nil {
			out += " { " + renderBaseChain(o.Base) + " }"
		}
		return out
	case *Set:
		kind := "set"
		if o.IsMap() || maps[o.Name] {
			kind = "map"
		}
		out := verb + " " + kind + " " + t + " " + renderName(o.Name)
		if op.Verb == VerbAdd {
			out += " { " + strings.Join(renderSetDecl(op.Table.Family, o), "; ") + "; }"
		}
		return out
	case *Element:
		if op.Verb == VerbFlush {
			return renderLoud("bad-op", "flush of an element")
		}
		el := renderKey(o.Key, o.KeyEnd)
		if op.Verb == VerbAdd {
			el = renderElement(*o)
		}
		return verb + " element " + t + " " + renderName(o.Set) + " { " + el + " }"
	case *Rule:
		switch op.Verb {
		case VerbAdd:
			return "add rule " + t + " " + renderName(o.Chain) + " " + RenderRule(op.Table.Family, *o)
		case VerbDelete:
			if o.Handle == 0 {
				return renderLoud("bad-op", "delete of a rule without a handle")
			}
			return fmt.Sprintf("delete rule %s %s handle %d", t, renderName(o.Chain), o.Handle)
		}
		return renderLoud("bad-op", "flush of a rule")
	}
	return renderLoud("bad-object", fmt.Sprintf("%T", op.Object))
}
