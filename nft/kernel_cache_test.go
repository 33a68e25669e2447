package nft

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/netns"
)

// Element ops on sets the transaction does not add need the sets' definitions: the kernel layer
// reads them once per table, then follows its own transactions, and reads again only for a
// set it does not know (another writer's).
func TestKernelSetCacheAvoidsReadBack(t *testing.T) {
	ns := netns.New(t, "nftp-cache")
	k, err := NewKernel(WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	ctx := context.Background()
	tbl := Table{Family: IPv4, Name: "cache"}
	elem := func(set, addr string) *Element {
		return &Element{Set: set, Key: []Value{Addr(netip.MustParseAddr(addr))}}
	}
	apply := func(step string, ops func(tx *Transaction)) {
		t.Helper()
		tx := NewTransaction(tbl)
		ops(tx)
		if _, err := k.Apply(ctx, tx); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	apply("create", func(tx *Transaction) {
		tx.Add(&TableObj{})
		tx.Add(&Set{Name: "a", Key: []Type{TypeIPv4Addr}})
		tx.Add(elem("a", "198.18.0.1"))
	})
	apply("first element-only transaction", func(tx *Transaction) { tx.Add(elem("a", "198.18.0.2")) })
	if k.setReads != 1 {
		t.Fatalf("set read-backs after the first element-only transaction: %d, want 1", k.setReads)
	}
	for i, a := range []string{"198.18.0.3", "198.18.0.4", "198.18.0.5"} {
		apply("element-only transaction", func(tx *Transaction) { tx.Add(elem("a", a)) })
		if k.setReads != 1 {
			t.Fatalf("set read-backs after %d more element-only transactions: %d, want still 1", i+1, k.setReads)
		}
	}
	apply("a set added by us is known", func(tx *Transaction) {
		tx.Add(&Set{Name: "b", Key: []Type{TypeIPv4Addr}})
	})
	apply("element of our new set", func(tx *Transaction) { tx.Add(elem("b", "198.18.0.9")) })
	if k.setReads != 1 {
		t.Fatalf("set read-backs after using a set we added: %d, want 1", k.setReads)
	}
	if _, err := ns.Run("nft", "add", "set", "ip", "cache", "other", "{ type ipv4_addr; }"); err != nil {
		t.Fatal(err)
	}
	apply("element of another writer's set", func(tx *Transaction) { tx.Add(elem("other", "198.18.0.7")) })
	if k.setReads != 2 {
		t.Fatalf("set read-backs after another writer's set: %d, want 2", k.setReads)
	}
	out, err := ns.Run("nft", "list", "set", "ip", "cache", "other")
	if err != nil {
		t.Fatal(err)
	}
	if want := "198.18.0.7"; !strings.Contains(out, want) {
		t.Fatalf("element %s missing from another writer's set:\n%s", want, out)
	}
}
