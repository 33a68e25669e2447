package nft

import (
	"net/netip"
	"slices"
	"time"
)

// Expr is one expression of a rule: a match (the rule continues only if it holds) or a statement
// (it acts on the packet). Only the types in this file implement it: the kernel codec, the fake and
// the text renderer each know every one of them, so callers never build raw bytecode.
type Expr interface{ isExpr() }

// Field is a packet or metadata field a match or a key reads. Address fields follow the table's
// family (ip saddr in an ip table, ip6 saddr in an ip6 table).
type Field uint8

// Fields.
const (
	FieldInvalid Field = iota
	FieldSaddr         // ip saddr / ip6 saddr
	FieldDaddr         // ip daddr / ip6 daddr
	FieldL4Proto       // meta l4proto
	FieldSport         // th sport
	FieldDport         // th dport
	FieldMark          // meta mark
	// Conntrack tuple fields: the connection's original direction (what the client sent) and
	// its reply direction (what the endpoint answers from once DNAT is set up). After DNAT they
	// still name the frontend (original) and the chosen endpoint (reply). nft reads
	// "ct original proto-dst" and "ct reply proto-src" in a concatenation only after a protocol
	// match in the same rule ("meta l4proto tcp"); without one it cannot read the listing back.
	FieldCtOrigDaddr     // ct original ip daddr / ct original ip6 daddr
	FieldCtOrigProtoDst  // ct original proto-dst
	FieldCtReplySaddr    // ct reply ip saddr / ct reply ip6 saddr
	FieldCtReplyProtoSrc // ct reply proto-src
)

// Type returns the field's key type in a table of family f.
func (fl Field) Type(f Family) Type {
	switch fl {
	case FieldSaddr, FieldDaddr, FieldCtOrigDaddr, FieldCtReplySaddr:
		return f.AddrType()
	case FieldL4Proto:
		return TypeInetProto
	case FieldSport, FieldDport, FieldCtOrigProtoDst, FieldCtReplyProtoSrc:
		return TypeInetService
	case FieldMark:
		return TypeMark
	}
	return TypeInvalid
}

// Cmp matches when Field equals Value (differs, with Neg): "ip daddr 198.18.0.1", "meta l4proto tcp".
type Cmp struct {
	Field Field
	Neg   bool
	Value Value
}

// CmpPrefix matches when an address field lies in Prefix (outside it, with Neg):
// "ip saddr != 198.18.0.0/15".
type CmpPrefix struct {
	Field  Field
	Neg    bool
	Prefix netip.Prefix
}

// CmpSet matches when the concatenation of Fields is an element of the named set (is not, with
// Neg): "ip daddr @cluster-ips", "ip saddr . ip daddr @hairpin".
type CmpSet struct {
	Fields []Field
	Neg    bool
	Set    string
}

// VMap looks the concatenation of Fields up in a verdict map and takes the element's verdict;
// without a match the rule does nothing: "ip daddr . meta l4proto . th dport vmap @service-ips".
type VMap struct {
	Fields []Field
	Map    string
}

// MarkTest matches "meta mark & Mask != 0" (NonZero) or "meta mark & Mask == 0".
type MarkTest struct {
	Mask    uint32
	NonZero bool
}

// Conntrack state bits (ct state), as the kernel defines them.
const (
	CtStateInvalid     uint32 = 1
	CtStateEstablished uint32 = 2
	CtStateRelated     uint32 = 4
	CtStateNew         uint32 = 8
	CtStateUntracked   uint32 = 64
)

// Conntrack status bits (ct status) used by nftproxy.
const (
	CtStatusSNAT uint32 = 0x10
	CtStatusDNAT uint32 = 0x20
)

// CtState matches when the connection's state is any of the bits in Mask: "ct state new".
type CtState struct{ Mask uint32 }

// CtStatus matches when any of the status bits in Mask is set: "ct status dnat".
type CtStatus struct{ Mask uint32 }

// FibAddrType matches on the routing type of the destination (Daddr) or source address:
// "fib daddr type local" (RTN_LOCAL, with Local) or its negation (Neg).
type FibAddrType struct {
	Daddr bool
	Neg   bool
}

// MarkOr sets bits: "meta mark set meta mark | 0x00004000".
type MarkOr struct{ Bits uint32 }

// MarkXor flips bits (clears bits known to be set): "meta mark set meta mark ^ 0x00004000".
type MarkXor struct{ Bits uint32 }

// Masquerade rewrites the source to the outgoing interface's address.
type Masquerade struct{ FullyRandom bool }

// DNAT rewrites the destination to Addr, and to Port unless Port is 0 (the port is then kept).
type DNAT struct {
	Addr netip.Addr
	Port uint16
}

// DNATNumgen picks an endpoint at random: "dnat to numgen random mod N map @m". The map is keyed by
// integer 0..N-1; its data is an address (WithPort false: the destination port is kept) or
// "address . inet_service" (WithPort true).
//
// With Key, the map key is the concatenation of those packet fields followed by the random
// number: "dnat ip to ip daddr . meta l4proto . th dport . numgen random mod N map @m". One
// shared map then serves every frontend (the packet's own address, protocol and port select
// its slots), so no per-Service map is needed. The map's Key is the fields' types then
// TypeInteger. Allowed keys are DNATNumgenKeyAddr and DNATNumgenKeyPort (see ValidNumgenKey).
type DNATNumgen struct {
	Modulus  uint32
	Map      string
	WithPort bool
	Key      []Field
}

// The two packet-field keys a DNATNumgen may put before its random number: a Service address
// frontend (ClusterIP, load-balancer or external IP) and a node port (any local address).
var (
	DNATNumgenKeyAddr = []Field{FieldDaddr, FieldL4Proto, FieldDport}
	DNATNumgenKeyPort = []Field{FieldL4Proto, FieldDport}
)

// ValidNumgenKey reports whether key is one of the DNATNumgen keys the codec, the Fake and the
// renderer support: empty, DNATNumgenKeyAddr or DNATNumgenKeyPort.
func ValidNumgenKey(key []Field) bool {
	return len(key) == 0 || slices.Equal(key, DNATNumgenKeyAddr) || slices.Equal(key, DNATNumgenKeyPort)
}

// Reject answers the packet: a TCP reset (TCPReset) or an ICMP/ICMPv6 port unreachable.
type Reject struct{ TCPReset bool }

// NumgenMatch matches when a fresh random number modulo Modulus equals Value:
// "numgen random mod 3 0". A chain of such rules, the i-th (from 0) matching with "mod N-i", picks
// one of N statements uniformly where a map cannot be used (each choice must also update its own
// set).
type NumgenMatch struct {
	Modulus uint32
	Value   uint32
}

// SetUpdate adds (or refreshes) the concatenation of Fields in a dynamic set from the packet path:
// "update @affinity { ip saddr }". Timeout 0 uses the set's default.
//
// With Data, Set is a map and the element added is "Fields : Data" (constants): "update @m { ip
// saddr . ip daddr . meta l4proto . th dport timeout 3h : 198.18.0.1 . 8080 }". On an element
// that exists the kernel only refreshes its expiration and keeps its data. When the map is full
// (Set.Size) the update fails and the rule stops there, like a match that did not hold.
//
// With DataFields instead of Data, the element's data is read from the packet and its
// connection: "update @m { ip saddr . ct original ip daddr . meta l4proto . ct original
// proto-dst timeout 3h : ct reply ip saddr . ct reply proto-src }" records, after DNAT, the
// endpoint a connection was sent to. Data and DataFields exclude each other.
type SetUpdate struct {
	Fields     []Field
	Set        string
	Timeout    time.Duration
	Data       []Value
	DataFields []Field
}

// DNATMap rewrites the destination to the data of the element of Map whose key is the
// concatenation of Fields: "dnat ip to ip saddr . ip daddr . meta l4proto . th dport map @m".
// The map's data is an address (WithPort false: the destination port is kept, or set to Port
// when not 0: "dnat to ip6 saddr map @m:8080") or "address . inet_service" (WithPort). Without
// an element the rule stops there, like a match that did not hold.
type DNATMap struct {
	Fields   []Field
	Map      string
	WithPort bool
	Port     uint16
}

// SocketKey selects what a SocketMatch compares of the socket the kernel finds.
type SocketKey uint8

// Socket keys (NFT_SOCKET_TRANSPARENT, NFT_SOCKET_WILDCARD).
const (
	SocketTransparent SocketKey = 0 // the socket has IP_TRANSPARENT
	SocketWildcard    SocketKey = 2 // the socket is bound to the wildcard address
)

// SocketMatch matches when the kernel finds a socket for the packet and that socket's Key is
// Value: "socket wildcard 1". At prerouting and input the kernel looks the packet's own tuple
// up (an established connection, else a listener on its destination address and port); found
// none, the rule stops there, like a match that did not hold. At output it takes the sending
// socket, so there it says nothing about who listens on the destination. "socket wildcard"
// finds only full sockets (a time-wait or half-open one stops the rule too); "socket
// transparent" any. The kernel allows it at prerouting, input and output only.
type SocketMatch struct {
	Key   SocketKey
	Value bool
}

// Redirect rewrites the destination to an address of the node itself and to Port: "redirect to
// :10253". At prerouting the address is the incoming interface's first address, at output the
// loopback address. nft requires a protocol match before it ("meta l4proto tcp"); the kernel
// allows it in nat chains at prerouting and output only. Port is never 0.
type Redirect struct{ Port uint16 }

func (Cmp) isExpr()         {}
func (CmpPrefix) isExpr()   {}
func (CmpSet) isExpr()      {}
func (VMap) isExpr()        {}
func (MarkTest) isExpr()    {}
func (CtState) isExpr()     {}
func (CtStatus) isExpr()    {}
func (FibAddrType) isExpr() {}
func (MarkOr) isExpr()      {}
func (MarkXor) isExpr()     {}
func (Masquerade) isExpr()  {}
func (DNAT) isExpr()        {}
func (DNATNumgen) isExpr()  {}
func (DNATMap) isExpr()     {}
func (Reject) isExpr()      {}
func (NumgenMatch) isExpr() {}
func (SetUpdate) isExpr()   {}
func (Verdict) isExpr()     {}
func (SocketMatch) isExpr() {}
func (Redirect) isExpr()    {}

// Unknown stands for kernel bytecode that matches none of the shapes above (someone else wrote
// it into our table). It is only ever read back, never sent.
type Unknown struct{ Description string }

func (Unknown) isExpr() {}
