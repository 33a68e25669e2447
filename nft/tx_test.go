package nft

import "testing"

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
