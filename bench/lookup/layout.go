// Package lookup measures what the service dispatch costs a packet in the kernel: the lookups
// the `services` chain makes in its verdict maps, for the layouts nftproxy could use. It builds
// the maps in a private receiver namespace, floods it with UDP from a sender namespace over a
// veth pair, and times the flood with and without the lookups. See bench/README.md for the
// method and the figures.
package lookup

import (
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
)

// Layout is one way to lay out the dispatch maps.
type Layout int

// Layouts.
const (
	// Baseline runs no lookup: the cost of the flood itself.
	Baseline Layout = iota
	// HashPlusInterval is nftproxy's current layout: exact ports in a hash map, then port ranges
	// in an interval (pipapo) map, then all-ports Services in a hash map keyed by address and
	// protocol. A packet stops at the first hit.
	HashPlusInterval
	// SingleInterval keeps exact ports (as one-port intervals) and ranges in one interval map,
	// then the all-ports hash map.
	SingleInterval
)

// String names the layout for tables.
func (l Layout) String() string {
	switch l {
	case Baseline:
		return "baseline"
	case HashPlusInterval:
		return "hash+interval"
	case SingleInterval:
		return "one interval map"
	}
	return fmt.Sprintf("layout(%d)", int(l))
}

// Pattern is what the flooded packets hit.
type Pattern int

// Patterns.
const (
	// Exact packets hit exact-port Services.
	Exact Pattern = iota
	// Range packets hit port-range Services, at ports spread over each range.
	Range
	// Miss packets go to addresses no map holds.
	Miss
)

// String names the pattern for tables.
func (p Pattern) String() string {
	switch p {
	case Exact:
		return "exact hit"
	case Range:
		return "range hit"
	case Miss:
		return "miss"
	}
	return fmt.Sprintf("pattern(%d)", int(p))
}

// Object names in the receiver's table.
const (
	mapHash          = "service-ips"
	mapRanges        = "service-ranges"
	mapAllPorts      = "service-allports"
	mapSingle        = "service-ports"
	chainHit         = "hit"
	chainPre         = "pre"
	chainDispatchHPI = "dispatch-hash"
	chainDispatchOne = "dispatch-interval"
)

// Address plan (all inside 198.18.0.0/15): the veth link is 198.18.0.0/30, exact-port Services
// take consecutive addresses from 198.19.0.0, ranges 198.19.250.0/24, all-ports Services
// 198.19.251.0/24, and misses go to 198.19.252.0/24, which no map holds.
var (
	senderAddr   = netip.MustParseAddr("198.18.0.1")
	receiverAddr = netip.MustParseAddr("198.18.0.2")
	exactBase    = netip.MustParseAddr("198.19.0.0")
	rangeBase    = netip.MustParseAddr("198.19.250.0")
	allPortsBase = netip.MustParseAddr("198.19.251.0")
	missBase     = netip.MustParseAddr("198.19.252.0")
)

// Range services cover rangeWidth ports from rangeStart.
const (
	rangeStart = 10000
	rangeWidth = 1000
	missPort   = 9
)

// Table is the receiver's table.
var Table = nft.Table{Family: nft.IPv4, Name: "lookupbench"}

// Maps sizes the dispatch maps.
type Maps struct {
	Exact    int // exact-port Services (at most 60,000)
	Ranges   int // port-range Services (at most 250)
	AllPorts int // all-ports Services (at most 250)
}

func nth(base netip.Addr, i int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// exactKey is the i-th exact-port Service: even ones UDP, odd ones TCP, on ports 80..129.
func exactKey(i int) (netip.Addr, uint8, uint16) {
	proto := uint8(unix.IPPROTO_UDP)
	if i%2 == 1 {
		proto = unix.IPPROTO_TCP
	}
	return nth(exactBase, i), proto, uint16(80 + i%50)
}

func key(a netip.Addr, proto uint8, port uint16) []nft.Value {
	return []nft.Value{nft.Addr(a), nft.Proto(proto), nft.Port(port)}
}

// Build returns the transaction that creates the receiver's table: both layouts' maps filled
// with the same Services, a dispatch chain for each, and the prerouting chain (empty: the
// Baseline). Select switches the prerouting chain between them.
func Build(m Maps) *nft.Transaction {
	tx := nft.NewTransaction(Table)
	tx.Add(&nft.TableObj{})
	addrProtoPort := []nft.Type{nft.TypeIPv4Addr, nft.TypeInetProto, nft.TypeInetService}
	verdict := []nft.Type{nft.TypeVerdict}
	for _, s := range []nft.Set{
		{Name: mapHash, Key: addrProtoPort, Data: verdict},
		{Name: mapRanges, Key: addrProtoPort, Data: verdict, Interval: true},
		{Name: mapAllPorts, Key: []nft.Type{nft.TypeIPv4Addr, nft.TypeInetProto}, Data: verdict},
		{Name: mapSingle, Key: addrProtoPort, Data: verdict, Interval: true},
	} {
		tx.Add(&s)
	}
	tx.Add(&nft.Chain{Name: chainHit})
	hit := &nft.Verdict{Kind: nft.VerdictGoto, Chain: chainHit}
	for i := 0; i < m.Exact; i++ {
		a, p, port := exactKey(i)
		k := key(a, p, port)
		tx.Add(&nft.Element{Set: mapHash, Key: k, Verdict: hit})
		tx.Add(&nft.Element{Set: mapSingle, Key: k, KeyEnd: k, Verdict: hit})
	}
	for i := 0; i < m.Ranges; i++ {
		a := nth(rangeBase, i)
		k, end := key(a, unix.IPPROTO_UDP, rangeStart), key(a, unix.IPPROTO_UDP, rangeStart+rangeWidth-1)
		tx.Add(&nft.Element{Set: mapRanges, Key: k, KeyEnd: end, Verdict: hit})
		tx.Add(&nft.Element{Set: mapSingle, Key: k, KeyEnd: end, Verdict: hit})
	}
	for i := 0; i < m.AllPorts; i++ {
		tx.Add(&nft.Element{Set: mapAllPorts, Key: []nft.Value{nft.Addr(nth(allPortsBase, i)), nft.Proto(unix.IPPROTO_UDP)}, Verdict: hit})
	}
	fields3 := []nft.Field{nft.FieldDaddr, nft.FieldL4Proto, nft.FieldDport}
	fields2 := []nft.Field{nft.FieldDaddr, nft.FieldL4Proto}
	dispatch := map[string][]nft.VMap{
		chainDispatchHPI: {{Fields: fields3, Map: mapHash}, {Fields: fields3, Map: mapRanges}, {Fields: fields2, Map: mapAllPorts}},
		chainDispatchOne: {{Fields: fields3, Map: mapSingle}, {Fields: fields2, Map: mapAllPorts}},
	}
	for _, name := range []string{chainDispatchHPI, chainDispatchOne} {
		tx.Add(&nft.Chain{Name: name})
		for _, v := range dispatch[name] {
			tx.Add(&nft.Rule{Chain: name, Exprs: []nft.Expr{v}})
		}
	}
	tx.Add(&nft.Chain{Name: chainPre, Base: &nft.BaseChain{Type: nft.ChainTypeFilter, Hook: nft.HookPrerouting, Priority: -300}})
	tx.Add(&nft.Rule{Chain: chainPre, Exprs: []nft.Expr{nft.Verdict{Kind: nft.VerdictDrop}}})
	return tx
}

// Select returns the transaction that makes every packet run layout l's dispatch repeat times
// (jump to the dispatch chain; a hit's goto ends in the empty `hit` chain, which returns to the
// next jump), then drop. Baseline only drops.
func Select(l Layout, repeat int) *nft.Transaction {
	tx := nft.NewTransaction(Table)
	pre := &nft.Chain{Name: chainPre, Base: &nft.BaseChain{Type: nft.ChainTypeFilter, Hook: nft.HookPrerouting, Priority: -300}}
	tx.Flush(pre)
	target := ""
	switch l {
	case HashPlusInterval:
		target = chainDispatchHPI
	case SingleInterval:
		target = chainDispatchOne
	}
	if target != "" {
		for i := 0; i < repeat; i++ {
			tx.Add(&nft.Rule{Chain: chainPre, Exprs: []nft.Expr{nft.Verdict{Kind: nft.VerdictJump, Chain: target}}})
		}
	}
	tx.Add(&nft.Rule{Chain: chainPre, Exprs: []nft.Expr{nft.Verdict{Kind: nft.VerdictDrop}}})
	return tx
}

// Dest is one flood destination.
type Dest struct {
	Addr netip.Addr
	Port uint16
}

// Dests returns n UDP destinations of pattern p: exact-port Services spread over the whole map,
// every range Service at ports spread over its range, or addresses no map holds.
func Dests(m Maps, p Pattern, n int) []Dest {
	out := make([]Dest, 0, n)
	switch p {
	case Exact:
		udp := (m.Exact + 1) / 2 // even indices are UDP
		for i := 0; i < n; i++ {
			j := 2 * ((i * 7919) % udp) // a prime stride visits the whole map
			a, _, port := exactKey(j)
			out = append(out, Dest{a, port})
		}
	case Range:
		for i := 0; i < n; i++ {
			out = append(out, Dest{nth(rangeBase, i%m.Ranges), uint16(rangeStart + (i*37)%rangeWidth)})
		}
	case Miss:
		for i := 0; i < n; i++ {
			out = append(out, Dest{nth(missBase, i%250), missPort})
		}
	}
	return out
}
