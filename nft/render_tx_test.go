package nft

import (
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/test/golden"
)

// TestRenderTransaction writes one op of every kind in nft's command syntax, in op order, each
// naming its table, and a flush of a map added earlier as `flush map` (nft refuses `flush set`
// on a map).
func TestRenderTransaction(t *testing.T) {
	v4 := Table{Family: IPv4, Name: "nftproxy"}
	a := func(s string) Value { return Addr(netip.MustParseAddr(s)) }
	tcp := Proto(unix.IPPROTO_TCP)
	tx := NewTransaction(v4)
	tx.Add(&TableObj{})
	tx.Add(&Chain{Name: "nat-prerouting", Base: &BaseChain{Type: ChainTypeNAT, Hook: HookPrerouting, Priority: -100}})
	tx.Add(&Chain{Name: "pick-2"})
	tx.Add(&Set{Name: "endpoints", Key: []Type{TypeIPv4Addr, TypeInetProto, TypeInetService, TypeInteger},
		Data: []Type{TypeIPv4Addr, TypeInetService}, NumgenKey: 1, Comment: "endpoints"})
	tx.Add(&Set{Name: "affinity", Key: []Type{TypeIPv4Addr}, Dynamic: true, Timeout: 3 * time.Hour})
	tx.Add(&Set{Name: "cidrs", Key: []Type{TypeIPv4Addr}, Interval: true})
	tx.Add(&Rule{Chain: "pick-2", Exprs: []Expr{DNATNumgen{Modulus: 2, Map: "endpoints", WithPort: true, Key: DNATNumgenKeyAddr}}, Comment: "two"})
	tx.Add(&Element{Set: "endpoints", Key: []Value{a("198.19.0.10"), tcp, Port(80), Int(0)}, Data: []Value{a("198.18.128.11"), Port(8080)}})
	tx.Add(&Element{Set: "cidrs", Key: []Value{a("198.18.128.0")}, KeyEnd: []Value{a("198.18.255.255")}, Comment: "pods"})
	tx.Delete(&Element{Set: "endpoints", Key: []Value{a("198.19.0.10"), tcp, Port(80), Int(1)}, Data: []Value{a("198.18.128.12"), Port(8080)}})
	tx.Delete(&Element{Set: "cidrs", Key: []Value{a("198.18.128.0")}, KeyEnd: []Value{a("198.18.255.255")}, Comment: "pods"})
	tx.Flush(&Set{Name: "endpoints"})
	tx.Flush(&Set{Name: "cidrs"})
	tx.Flush(&Chain{Name: "pick-2"})
	tx.Delete(&Rule{Chain: "pick-2", Handle: 7})
	tx.Table = Table{Family: IPv6, Name: "nftproxy"}
	tx.Delete(&Set{Name: "old"})
	tx.Delete(&Chain{Name: "pick-3"})
	tx.Delete(&TableObj{})
	want := `add table ip nftproxy
add chain ip nftproxy nat-prerouting { type nat hook prerouting priority -100; policy accept; }
add chain ip nftproxy pick-2
add map ip nftproxy endpoints { typeof ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport; comment "endpoints"; }
add set ip nftproxy affinity { type ipv4_addr; flags dynamic,timeout; timeout 3h; }
add set ip nftproxy cidrs { type ipv4_addr; flags interval; }
add rule ip nftproxy pick-2 dnat ip to ip daddr . meta l4proto . th dport . numgen random mod 2 map @endpoints comment "two"
add element ip nftproxy endpoints { 198.19.0.10 . tcp . 80 . 0 : 198.18.128.11 . 8080 }
add element ip nftproxy cidrs { 198.18.128.0-198.18.255.255 comment "pods" }
delete element ip nftproxy endpoints { 198.19.0.10 . tcp . 80 . 1 }
delete element ip nftproxy cidrs { 198.18.128.0-198.18.255.255 }
flush map ip nftproxy endpoints
flush set ip nftproxy cidrs
flush chain ip nftproxy pick-2
delete rule ip nftproxy pick-2 handle 7
delete set ip6 nftproxy old
delete chain ip6 nftproxy pick-3
delete table ip6 nftproxy
`
	if got := tx.String(); got != want {
		t.Errorf("rendered transaction (- want, + got):\n%s", golden.Diff(want, got))
	}
}
