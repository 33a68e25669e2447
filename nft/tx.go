package nft

import (
	"context"
	"fmt"
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
// *Element or *Rule.
type Object interface{ objectKind() string }

// TableObj stands for the transaction's own table as the object of an Op.
type TableObj struct{}

func (*TableObj) objectKind() string { return "table" }
func (*Chain) objectKind() string    { return "chain" }
func (*Set) objectKind() string      { return "set" }
func (*Element) objectKind() string  { return "element" }
func (*Rule) objectKind() string     { return "rule" }

// Op is one operation of a transaction, on an object of Table.
type Op struct {
	Verb   Verb
	Table  Table
	Object Object
}

// Transaction is an ordered list of operations. Apply sends it as one netlink batch: the kernel
// commits all of it or none of it. Each Op carries its table, so one transaction can change the
// ip and the ip6 table together; Add, Delete and Flush record the transaction's current Table.
type Transaction struct {
	// Table is the table the next Add/Delete/Flush acts on. Set it to switch tables.
	Table Table
	Ops   []Op
}

// NewTransaction starts an empty transaction whose operations act on table t.
func NewTransaction(t Table) *Transaction { return &Transaction{Table: t} }

// Grow makes room for n more operations: a full sync adds hundreds of thousands, and growing
// the list by doubling allocated about four times its final size.
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

// Len is the number of operations.
func (tx *Transaction) Len() int { return len(tx.Ops) }

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
