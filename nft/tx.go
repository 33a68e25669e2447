package nft

import (
	"context"
	"fmt"
	"iter"
	"time"
)

// Verb is what an Op does to its object.
type Verb uint8

// Verbs. Add creates an object, or leaves an identical existing one alone (like "nft add"); an
// element whose key exists with a different value fails: change values with Delete then Add.
// Flush empties a chain (its rules) or a set (its elements).
const (
	VerbAdd Verb = iota + 1
	VerbDelete
	VerbFlush
)

// String returns the verb as nft spells it.
func (v Verb) String() string {
	switch v {
	case VerbAdd:
		return "add"
	case VerbDelete:
		return "delete"
	case VerbFlush:
		return "flush"
	}
	return fmt.Sprintf("verb(%d)", uint8(v))
}

// Object is what an Op acts on: *TableObj (the transaction's table itself), *Chain, *Set,
// *Element, *Packed (an element in packed form), *Rule, or *PackedList (many elements).
type Object interface{ objectKind() string }

// TableObj stands for the transaction's own table as the object of an Op.
type TableObj struct{}

func (*TableObj) objectKind() string { return "table" }
func (*Chain) objectKind() string    { return "chain" }
func (*Set) objectKind() string      { return "set" }
func (*Element) objectKind() string  { return "element" }
func (*Rule) objectKind() string     { return "rule" }

// PackedList stands for one operation on each of its elements, in order: an Op whose object is
// a PackedList is as many Ops on *Packed, with its verb and table. A full sync hands its
// hundreds of thousands of element ops over so, the elements the caller's own (the
// reconciler's indexes hold them), instead of an Op each, held until the batch is sent
// (bench/README.md, "Memory: peak resident set", gives what that saved). The elements must not change until the
// transaction is applied. Len, All and Op count each element as one operation, and so does
// OpError.Index.
type PackedList struct{ Elements []*Packed }

func (*PackedList) objectKind() string { return "element" }

// Op is one operation of a transaction, on an object of Table.
type Op struct {
	Verb   Verb
	Table  Table
	Object Object
}

// Transaction is an ordered list of operations. Apply sends it as one netlink batch: the kernel
// commits all of it or none of it. Each Op carries its table, so one transaction can change the
// ip and the ip6 table together; Add, Delete and Flush record the transaction's current Table.
// An Op on a *PackedList is one operation per element of the list: read the operations with
// All (or Op and Len), which number them so, rather than ranging over Ops.
type Transaction struct {
	// Table is the table the next Add/Delete/Flush acts on. Set it to switch tables.
	Table Table
	Ops   []Op
}

// NewTransaction starts an empty transaction whose operations act on table t.
func NewTransaction(t Table) *Transaction { return &Transaction{Table: t} }

// Grow makes room for n more Ops: a full sync adds thousands, and growing the list by doubling
// allocated about four times its final size.
func (tx *Transaction) Grow(n int) {
	if n > cap(tx.Ops)-len(tx.Ops) {
		ops := make([]Op, len(tx.Ops), len(tx.Ops)+n)
		copy(ops, tx.Ops)
		tx.Ops = ops
	}
}

// Add appends an add operation. Rules are appended to the end of their chain.
func (tx *Transaction) Add(o Object) {
	tx.Ops = append(tx.Ops, Op{Verb: VerbAdd, Table: tx.Table, Object: o})
}

// Delete appends a delete operation. A rule is deleted by its Handle; a table, chain or set by name.
func (tx *Transaction) Delete(o Object) {
	tx.Ops = append(tx.Ops, Op{Verb: VerbDelete, Table: tx.Table, Object: o})
}

// Flush appends a flush of a chain (*Chain) or of a set (*Set).
func (tx *Transaction) Flush(o Object) {
	tx.Ops = append(tx.Ops, Op{Verb: VerbFlush, Table: tx.Table, Object: o})
}

// Len is the number of operations, each element of a PackedList counted.
func (tx *Transaction) Len() int {
	n := len(tx.Ops)
	for _, op := range tx.Ops {
		if l, ok := op.Object.(*PackedList); ok {
			n += len(l.Elements) - 1
		}
	}
	return n
}

// All yields the operations in order with their index (0 to Len()-1), a PackedList's as one
// Op on each of its elements.
func (tx *Transaction) All() iter.Seq2[int, Op] {
	return func(yield func(int, Op) bool) {
		i := 0
		for _, op := range tx.Ops {
			l, ok := op.Object.(*PackedList)
			if !ok {
				if !yield(i, op) {
					return
				}
				i++
				continue
			}
			for _, p := range l.Elements {
				if !yield(i, Op{Verb: op.Verb, Table: op.Table, Object: p}) {
					return
				}
				i++
			}
		}
	}
}

// Op returns operation i (as All numbers them). It walks the Ops: for error paths and tests.
func (tx *Transaction) Op(i int) Op {
	at := i
	for _, op := range tx.Ops {
		n := 1
		l, ok := op.Object.(*PackedList)
		if ok {
			n = len(l.Elements)
		}
		if i < n {
			if ok {
				return Op{Verb: op.Verb, Table: op.Table, Object: l.Elements[i]}
			}
			return op
		}
		i -= n
	}
	panic(fmt.Sprintf("nft: operation %d of a transaction of %d", at, tx.Len()))
}

// Stats describes one applied transaction.
type Stats struct {
	Ops      int           // operations in the transaction
	Messages int           // netlink messages sent (element lists are split into several)
	Bytes    int           // bytes sent to the kernel
	Duration time.Duration // from the first byte sent to the kernel's answer
}

// Interface is the kernel as nftproxy sees it. Implementations: Kernel (netlink) and Fake (memory).
// Neither is safe for concurrent use: one reconciler goroutine owns one Interface.
type Interface interface {
	// Apply commits tx atomically: on error the kernel holds exactly what it held before. The
	// error begins "apply transaction (N ops)", so callers need not say it again.
	Apply(ctx context.Context, tx *Transaction) (Stats, error)
	// Dump reads back everything table t holds. A missing table is an error for which
	// IsNotFound is true.
	Dump(ctx context.Context, t Table) (*Ruleset, error)
	// ListTables returns the names of the tables of family f.
	ListTables(ctx context.Context, f Family) ([]string, error)
}
