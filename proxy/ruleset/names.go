// Package ruleset turns the service model into the nftables objects nftproxy wants in the kernel.
// It is a pure function: no I/O, no clock, no kernel. The layout (which chains, maps and rules,
// and why) is described in README.md next to this file. It produces the reconciler's input, one
// fragment.Fragment per owner (the base layout, each Service): the builder depends on the
// type of what it hands on, never the reverse.
package ruleset

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// DefaultTable is the name of nftproxy's table in each family ("ip nftproxy", "ip6 nftproxy").
const DefaultTable = "nftproxy"

// Base chains: one per hook and priority nftproxy needs. See README.md for each choice.
const (
	ChainNATPrerouting     = "nat-prerouting"
	ChainNATOutput         = "nat-output"
	ChainNATPostrouting    = "nat-postrouting"
	ChainFilterPrerouting  = "filter-prerouting"
	ChainFilterInput       = "filter-input"
	ChainFilterForward     = "filter-forward"
	ChainFilterOutput      = "filter-output"
	ChainFilterOutputDNATd = "filter-output-post-dnat"
)

// Base chain priorities (README.md, "Hooks and priorities"). Conntrack runs at -200, so every
// hook sees ct state. The endpoint checks run before any NAT chain of any table (kube-proxy's
// nftables table and iptables-nft's nat chains sit at nft's dstnat, -100): a Service without
// endpoints is refused even while another proxy's rules, frozen, would still translate it. The
// ClusterIP check runs after DNAT (a packet still addressed to a ClusterIP there matched no
// defined port).
const (
	// PriorityDNAT is nat-prerouting's and nat-output's: one before nft's dstnat (-100), so
	// that nftproxy translates a Service another proxy also translates (kube-proxy's rules
	// during a migration): the first NAT chain to translate a connection is the only one that
	// does, and nftproxy's endpoints are the current ones.
	PriorityDNAT int32 = -101
	// PrioritySNAT is nft's srcnat: nat-postrouting.
	PrioritySNAT int32 = 100
	// PriorityBeforeDNAT is the endpoint checks' (filter-prerouting, -input, -forward,
	// -output): dstnat - 10, before every NAT chain.
	PriorityBeforeDNAT int32 = -110
	// PriorityAfterDNAT is the ClusterIP check's (filter-output-post-dnat): dstnat + 10.
	PriorityAfterDNAT int32 = -90
)

// Regular chains shared by all Services.
const (
	ChainServices        = "services"
	ChainMasquerading    = "masquerading"
	ChainEndpointsCheck  = "service-endpoints-check"
	ChainNodePortsCheck  = "nodeport-endpoints-check"
	ChainClusterIPsCheck = "cluster-ips-check"
	ChainReject          = "reject-chain"
	// ChainHealthChecks redirects health-check node ports nobody else holds to nftproxy's
	// listener (Config.HealthCheckPort), from nat-prerouting.
	ChainHealthChecks = "health-checks"
)

// Sets and maps shared by all Services.
const (
	// SetClusterIPs holds every ClusterIP with a programmed Service.
	SetClusterIPs = "cluster-ips"
	// SetNodePortIPs holds the node addresses that accept node ports.
	SetNodePortIPs = "nodeport-ips"
	// SetHairpin holds "endpoint . endpoint" pairs: a pod reaching itself through a Service.
	SetHairpin = "hairpin"
	// SetHealthCheckPorts holds the health-check node ports of externalTrafficPolicy=Local
	// Services, one element per Service, shared by all of them.
	SetHealthCheckPorts = "health-check-nodeports"
	// MapServiceIPs: address . protocol . port -> service chain (single ports, hash).
	MapServiceIPs = "service-ips"
	// MapServiceRanges: address . protocol . port-range -> service chain (interval).
	MapServiceRanges = "service-ranges"
	// MapServiceAllPorts: address . protocol -> service chain (all-ports Services).
	MapServiceAllPorts = "service-allports"
	// MapNodePorts: protocol . node port -> external chain (single node ports, hash).
	MapNodePorts = "service-nodeports"
	// MapNodePortRanges: protocol . node-port block -> external chain (interval). Apart from
	// the single node ports: the kernel's interval map (pipapo) costs time quadratic in the
	// elements added in one transaction, and its lookup grows with its elements.
	MapNodePortRanges = "service-nodeport-ranges"
	// MapNoEndpointServices: address . protocol . port(-range) -> reject, Services without endpoints.
	MapNoEndpointServices = "no-endpoint-services"
	// MapNoEndpointAllPorts: address . protocol -> reject, all-ports Services without endpoints.
	MapNoEndpointAllPorts = "no-endpoint-allports"
	// MapNoEndpointNodePorts: protocol . node port(-range) -> reject.
	MapNoEndpointNodePorts = "no-endpoint-nodeports"
	// MapEndpoints: address . protocol . port . slot -> endpoint address . port. The endpoints of
	// every address frontend (ClusterIP, LoadBalancer IP, external IP) of every shared-mode port,
	// slots 0..N-1 under the packet's own destination.
	MapEndpoints = "endpoints"
	// MapLocalEndpoints: the same key; this node's endpoints of the external frontends of
	// externalTrafficPolicy Local ports.
	MapLocalEndpoints = "local-endpoints"
	// MapNodePortEndpoints: protocol . node port . slot -> endpoint address . port.
	MapNodePortEndpoints = "nodeport-endpoints"
	// MapLocalNodePortEndpoints: the same key; this node's endpoints of externalTrafficPolicy
	// Local node ports.
	MapLocalNodePortEndpoints = "local-nodeport-endpoints"
	// MapAffinity (ip tables): client . address . protocol . port -> endpoint address . port, the
	// ClientIP affinity of every frontend, filled and refreshed by the packet path.
	MapAffinity = "affinity"
	// MapAffinityAddr (ip tables): the same key -> endpoint address, for ports that keep the
	// destination port (ranges, all-ports, node-port blocks).
	MapAffinityAddr = "affinity-addr"
	// MapStickyFrontends (ip tables): address . protocol . port -> jump to the chain recording
	// the endpoint a new connection of that sticky frontend was DNATed to (after DNAT, keyed
	// by the connection's original tuple).
	MapStickyFrontends = "sticky-frontends"
	// MapStickyNodePorts (ip tables): protocol . node port -> the same, for node ports.
	MapStickyNodePorts = "sticky-nodeports"
	// ChainAffinityHit (ip tables) sends a client with a live entry in MapAffinity back to its
	// endpoint; shared-mode sticky ports jump to it before their pick.
	ChainAffinityHit = "affinity-hit"
)

// AffinityRecordChain names the shared chain that records, after DNAT, the endpoint of a new
// connection to a sticky frontend of protocol proto with timeout: "affinity-record-tcp-10800s".
// One per protocol (nft reads "ct original proto-dst" only after a protocol match) and timeout
// in use; every update refreshes the entry's timeout.
func AffinityRecordChain(proto string, timeout time.Duration) string {
	return fmt.Sprintf("affinity-record-%s-%ds", proto, int64(timeout/time.Second))
}

// AffinityHitChain names the shared chain that sends a client of an own-chains port (one that
// keeps the destination port) with a live entry in the affinity map (MapAffinityAddr with
// keepPort) back to its endpoint and refreshes the entry for timeout: "affinity-hit-addr-60s".
// One per timeout in use: the kernel refreshes an entry by the timeout of the statement that
// finds it. (Shared-mode sticky ports use ChainAffinityHit and record after DNAT.)
func AffinityHitChain(keepPort bool, timeout time.Duration) string {
	infix := ""
	if keepPort {
		infix = "addr-"
	}
	return fmt.Sprintf("affinity-hit-%s%ds", infix, int64(timeout/time.Second))
}

// Names and comments built from user strings (namespace, Service and port names) fit the
// kernel's limits by construction, whatever those strings hold:
//   - a name is "<prefix>-<hash>-<readable>": the hash covers the full identity, so two ports never
//     share a name even when their readable parts are cut or sanitised the same; it comes first,
//     so cutting the name to nft.MaxNameLen never removes it;
//   - the readable part keeps only what nft can read back as a name (letters, digits, '/', '-',
//     '_', '.'); anything else becomes '_', one per character;
//   - a comment keeps what nft can hold in a quoted string (no double quote, no control
//     character, valid UTF-8) and is cut to nft.MaxCommentLen on a character boundary, keeping
//     its fixed ending ("…: 2 endpoints").
// The kernel would take other bytes, but a NUL cuts what it stores (every later read-back then
// differs: endless drift repairs) and nft could not load the listing again.

// hashLen is the number of base32 characters of the identity hash in a name (40 bits).
const hashLen = 8

// identity is the string the hash of a port's objects covers. It is "ns/name/tcp/port" (the
// form every existing name was hashed from) unless a field holds a '/', which would make two
// ports spell the same: then each field is quoted.
func identity(p model.PortName) string {
	if !strings.ContainsRune(p.Service.Namespace+p.Service.Name+p.Port, '/') {
		return p.String()
	}
	return strconv.Quote(p.Service.Namespace) + "/" + strconv.Quote(p.Service.Name) + "/" + p.Protocol.Lower() + "/" + strconv.Quote(p.Port)
}

func hash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return base32.StdEncoding.EncodeToString(sum[:])[:hashLen]
}

// portHash is the hash of a port's identity: short, stable, and unique enough that two ports
// never share a chain even when their readable suffixes are cut.
func portHash(p model.PortName) string { return hash(identity(p)) }

// objectName builds "prefix-hash-readable", sanitised and cut to the kernel's limit.
func objectName(prefix, h, readable string) string {
	n := prefix + "-" + h + "-" + nameText(readable)
	if len(n) > nft.MaxNameLen {
		n = n[:nft.MaxNameLen] // ASCII only: any byte is a character boundary
	}
	return n
}

// nameText replaces every character nft cannot read in a name with '_'.
func nameText(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '/', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, s)
}

func portObjectName(prefix string, p model.PortName) string {
	return objectName(prefix, portHash(p), p.String())
}

// commentText makes s a string nft can hold in a comment: a double quote becomes a single one,
// control characters and invalid UTF-8 become '_'.
func commentText(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, string(utf8.RuneError))
	}
	return strings.Map(func(r rune) rune {
		switch {
		case r == '"':
			return '\''
		case r == utf8.RuneError, r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
			return '_'
		}
		return r
	}, s)
}

// cutText cuts s to at most n bytes on a character boundary (s is valid UTF-8).
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// comment builds a comment from a user-derived name and a fixed ending of ours: the name is
// sanitised and, when the whole does not fit nft.MaxCommentLen, cut on a character boundary and
// marked with "..."; the ending stays whole.
func comment(name, ending string) string {
	name, ending = commentText(name), commentText(ending)
	if len(name)+len(ending) <= nft.MaxCommentLen {
		return name + ending
	}
	const mark = "..."
	room := nft.MaxCommentLen - len(ending) - len(mark)
	if room < 0 {
		return cutText(name+ending, nft.MaxCommentLen)
	}
	return cutText(name, room) + mark + ending
}

// ServiceChain names the chain that picks an endpoint for a ServicePort: "svc-HASH-ns/name/tcp/http".
func ServiceChain(p model.PortName) string { return portObjectName("svc", p) }

// ExternalChain names the chain for traffic that entered through a node port, LoadBalancer IP or
// external IP: "ext-HASH-ns/name/tcp/http".
func ExternalChain(p model.PortName) string { return portObjectName("ext", p) }

// LocalChain names the chain that picks one of this node's endpoints (traffic policy Local):
// "local-HASH-ns/name/tcp/http".
func LocalChain(p model.PortName) string { return portObjectName("local", p) }

// FirewallChain names the chain that checks loadBalancerSourceRanges for traffic to the
// LoadBalancer IPs: "fw-HASH-ns/name/tcp/http".
func FirewallChain(p model.PortName) string { return portObjectName("fw", p) }

// SourceRangesSet names the interval set of the sources a LoadBalancer IP accepts:
// "src-HASH-ns/name/tcp/http".
func SourceRangesSet(p model.PortName) string { return portObjectName("src", p) }

// AffinityMap names the dynamic map of an ip6 table's ServicePort with ClientIP affinity, client
// -> endpoint address: "affmap-HASH-ns/name/tcp/http".
func AffinityMap(p model.PortName) string { return portObjectName("affmap", p) }

// AffinitySet names the dynamic set of the clients stuck to one endpoint of a ServicePort with
// ClientIP affinity: "aff-HASH-ns/name/tcp/http__198.18.128.10/8080" (an IPv6 address with dots
// for colons, which nft names cannot hold). HASH covers the endpoint too, so a cut name stays
// unique. The set is named by the endpoint, not its position: other endpoints coming and going
// leave its clients where they are.
func AffinitySet(p model.PortName, ep netip.AddrPort) string {
	ep6 := "__" + strings.ReplaceAll(ep.Addr().String(), ":", ".") + "/" + strconv.Itoa(int(ep.Port()))
	return objectName("aff", hash(identity(p)+ep6), p.String()+ep6)
}
