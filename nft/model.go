// Package nft is nftproxy's only door to the kernel's nftables. Everyone else speaks the small
// declarative model in this file (tables, chains, sets and maps, elements, rules built from typed
// expressions) and hands it over as a Transaction; this package owns every netlink byte: byte order,
// concatenation padding, interval ends, batching. See README.md in this folder.
package nft

import (
	"fmt"
	"net/netip"
	"time"
)

// Family is the nftables address family of a table. nftproxy keeps one table per IP family.
type Family uint8

const (
	// IPv4 is the "ip" family (NFPROTO_IPV4).
	IPv4 Family = 2
	// IPv6 is the "ip6" family (NFPROTO_IPV6).
	IPv6 Family = 10
)

// String returns the family as nft spells it ("ip" or "ip6").
func (f Family) String() string {
	switch f {
	case IPv4:
		return "ip"
	case IPv6:
		return "ip6"
	}
	return fmt.Sprintf("family(%d)", uint8(f))
}

// AddrType is the element type of addresses in this family.
func (f Family) AddrType() Type {
	if f == IPv6 {
		return TypeIPv6Addr
	}
	return TypeIPv4Addr
}

// Table names one table. All objects of a Transaction live in its table.
type Table struct {
	Family Family
	Name   string
}

// String returns "ip nftproxy" style text.
func (t Table) String() string { return t.Family.String() + " " + t.Name }

// ChainType is the type of a base chain.
type ChainType string

// Chain types used by nftproxy.
const (
	ChainTypeFilter ChainType = "filter"
	ChainTypeNAT    ChainType = "nat"
)

// Hook is the netfilter hook a base chain is attached to.
type Hook string

// Netfilter hooks.
const (
	HookPrerouting  Hook = "prerouting"
	HookInput       Hook = "input"
	HookForward     Hook = "forward"
	HookOutput      Hook = "output"
	HookPostrouting Hook = "postrouting"
)

// Policy is a base chain's default verdict.
type Policy string

// Base chain policies.
const (
	PolicyAccept Policy = "accept"
	PolicyDrop   Policy = "drop"
)

// BaseChain holds the fields that attach a chain to a hook.
type BaseChain struct {
	Type     ChainType
	Hook     Hook
	Priority int32
	Policy   Policy // empty means accept
}

// Chain is a chain of the table. Base is nil for a regular chain (a jump/goto target).
type Chain struct {
	Name string
	Base *BaseChain
}

// Type is the type of one field of a set key or map value.
type Type uint8

// Field types. Their sizes and byte orders are fixed by the kernel and nft; see README.md.
const (
	TypeInvalid     Type = iota
	TypeIPv4Addr         // ipv4_addr: 4 bytes, network order
	TypeIPv6Addr         // ipv6_addr: 16 bytes, network order
	TypeInetProto        // inet_proto: 1 byte
	TypeInetService      // inet_service: 2 bytes, network order
	TypeMark             // mark: 4 bytes, host order
	TypeInteger          // integer (32 bit): 4 bytes, host order
	TypeVerdict          // verdict: only as the data of a verdict map
)

// String returns the type as nft spells it.
func (t Type) String() string {
	switch t {
	case TypeIPv4Addr:
		return "ipv4_addr"
	case TypeIPv6Addr:
		return "ipv6_addr"
	case TypeInetProto:
		return "inet_proto"
	case TypeInetService:
		return "inet_service"
	case TypeMark:
		return "mark"
	case TypeInteger:
		return "integer"
	case TypeVerdict:
		return "verdict"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Set is a named set or map. A map has Data; a verdict map has Data == []Type{TypeVerdict}.
type Set struct {
	Name string
	// Key lists the key's fields; more than one makes a concatenation ("a . b . c").
	Key []Type
	// Data lists the value's fields for a map (nil for a plain set).
	Data []Type
	// Interval allows elements that cover a range (Element.KeyEnd). With a concatenated key the
	// kernel uses its pipapo backend.
	Interval bool
	// Timeout gives elements a default lifetime; HasTimeout enables per-element timeouts
	// without a default. Either sets the "timeout" flag.
	Timeout    time.Duration
	HasTimeout bool
	// Dynamic lets rules add elements from the packet path (update @set { ... }).
	Dynamic bool
	// Size bounds the number of elements (NFTA_SET_DESC_SIZE); 0 sends none. An update from the
	// packet path into a full set fails (the rule stops). A set without a size that an update
	// statement binds gets DynsetDefaultSize from the kernel (and reads back so): give dynamic
	// sets a Size.
	Size    uint32
	Comment string
	// NumgenKey, when non-zero, says the key's last field is the result of "numgen random mod
	// NumgenKey" (the last Key type is TypeInteger) and Data is an address, or "address .
	// inet_service". Fields before it are packet fields described by their type: address
	// "ip daddr"/"ip6 daddr", inet_proto "meta l4proto", inet_service "th dport" (a
	// DNATNumgen with Key). nft can list and re-read an integer-keyed map only in its typeof
	// form ("typeof ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . th
	// dport"), so the kernel layer records those typeof expressions in the set's userdata
	// exactly as nft does (codec_objects.go). The modulus in a typeof is only a description.
	NumgenKey uint32
}

// DynsetDefaultSize is the bound the kernel gives a set without a size when an update statement
// binds it.
const DynsetDefaultSize = 65535

// IsMap reports whether the set maps keys to values.
func (s *Set) IsMap() bool { return len(s.Data) > 0 }

// IsVerdictMap reports whether the set maps keys to verdicts.
func (s *Set) IsVerdictMap() bool { return len(s.Data) == 1 && s.Data[0] == TypeVerdict }

// Value is one typed field of a key or of map data. Build it with Addr, Proto, Port, Int or Mark.
//
// The fields are ordered for size: a Value takes 32 bytes, not the 40 of Type first (a table of
// 10k Services × 10 endpoints read back holds about two million Values, its desired state as
// many).
type Value struct {
	Addr netip.Addr // TypeIPv4Addr / TypeIPv6Addr
	Num  uint32     // every other type
	Type Type
}

// Addr returns an address value of the address's own family.
func Addr(a netip.Addr) Value {
	a = a.Unmap()
	if a.Is4() {
		return Value{Type: TypeIPv4Addr, Addr: a}
	}
	return Value{Type: TypeIPv6Addr, Addr: a}
}

// Proto returns an inet_proto value (unix.IPPROTO_TCP, ...).
func Proto(p uint8) Value { return Value{Type: TypeInetProto, Num: uint32(p)} }

// Port returns an inet_service value.
func Port(p uint16) Value { return Value{Type: TypeInetService, Num: uint32(p)} }

// Int returns a 32-bit integer value (numgen results are integers).
func Int(n uint32) Value { return Value{Type: TypeInteger, Num: n} }

// Mark returns a mark value.
func Mark(m uint32) Value { return Value{Type: TypeMark, Num: m} }

// VerdictKind is what a verdict does.
type VerdictKind uint8

// Verdict kinds.
const (
	VerdictAccept VerdictKind = iota + 1
	VerdictDrop
	VerdictReturn
	VerdictContinue
	VerdictJump
	VerdictGoto
)

// Verdict ends (or redirects) rule evaluation. Chain is set for Jump and Goto.
type Verdict struct {
	Kind  VerdictKind
	Chain string
}

// Element is one element of a set or map.
type Element struct {
	Set string
	Key []Value
	// KeyEnd is the inclusive end of an interval element (Set.Interval); nil for a single key.
	KeyEnd []Value
	// Data is the value of a data map element; Verdict the value of a verdict map element.
	Data    []Value
	Verdict *Verdict
	Comment string
	// Timeout overrides the set's default timeout for this element (0: default).
	Timeout time.Duration
}

// Rule is an ordered list of expressions appended to a chain. Handle is set on rules read back
// from the kernel and used only to delete one rule.
type Rule struct {
	Chain   string
	Exprs   []Expr
	Comment string
	Handle  uint64
}

// Ruleset is everything one table holds, as read back by Dump. Elements are keyed by set name.
type Ruleset struct {
	Table    Table
	Chains   []Chain
	Sets     []Set
	Elements map[string][]Element // nil in a read-back by DumpPacked
	Rules    []Rule               // in chain order, chains in the order of Chains
}
