package nft

import (
	"reflect"
	"testing"
)

// TestTransactionGrow: Grow keeps the operations already there and makes room for n more.
func TestTransactionGrow(t *testing.T) {
	tx := NewTransaction(Table{Family: IPv4, Name: "t"})
	tx.Add(&Chain{Name: "a"})
	tx.Grow(100)
	if tx.Len() != 1 || tx.Ops[0].Object.(*Chain).Name != "a" {
		t.Fatalf("after Grow: %d ops, first %+v; want the one chain added before", tx.Len(), tx.Ops)
	}
	if c := cap(tx.Ops) - tx.Len(); c < 100 {
		t.Errorf("room for %d more ops after Grow(100), want at least 100", c)
	}
}

// TestTransactionPackedList: Len, All and Op count each element of a PackedList as one
// operation, in order, with the list's verb and table; an empty list is none.
func TestTransactionPackedList(t *testing.T) {
	t4, t6 := Table{Family: IPv4, Name: "t"}, Table{Family: IPv6, Name: "t"}
	el := func(n uint32) *Packed {
		p := Pack(&Element{Set: "s", Key: []Value{Int(n)}})
		return &p
	}
	a, b, c := el(1), el(2), el(3)
	tx := NewTransaction(t4)
	tx.Add(&Chain{Name: "x"})
	tx.Add(&PackedList{Elements: []*Packed{a, b}})
	tx.Add(&PackedList{})
	tx.Table = t6
	tx.Delete(&PackedList{Elements: []*Packed{c}})
	tx.Add(&Chain{Name: "y"})
	want := []Op{{VerbAdd, t4, &Chain{Name: "x"}}, {VerbAdd, t4, a}, {VerbAdd, t4, b}, {VerbDelete, t6, c}, {VerbAdd, t6, &Chain{Name: "y"}}}
	if tx.Len() != len(want) {
		t.Fatalf("Len() = %d, want %d", tx.Len(), len(want))
	}
	n := 0
	for i, op := range tx.All() {
		if i != n || !reflect.DeepEqual(op, want[i]) || !reflect.DeepEqual(tx.Op(i), want[i]) {
			t.Errorf("operation %d (the %dth yielded): All %+v, Op %+v, want %+v", i, n, op, tx.Op(i), want[i])
		}
		n++
	}
	if n != len(want) {
		t.Errorf("All yielded %d operations, want %d", n, len(want))
	}
}
