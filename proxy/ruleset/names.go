// Package ruleset turns the service model into the nftables objects nftproxy wants in the kernel.
// It is a pure function: no I/O, no clock, no kernel. The layout (which chains, maps and rules,
// and why) is described in README.md next to this file.
package ruleset

import (
	"crypto/sha256"
	"encoding/base32"
	"net/netip"
	"strconv"
	"strings"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// DefaultTable is the name of nftproxy's table in each family ("ip nftproxy", "ip6 nftproxy").
const DefaultTable = "nftproxy"

// Base chains: one per hook and priority nftproxy needs. See README.md for each choice.
const (
	ChainNATPrerouting     = "nat-prerouting"
	ChainNATOutput         = "nat-output"
	ChainNATPostrouting    = "nat-postrouting"
	ChainFilterInput       = "filter-input"
	ChainFilterForward     = "filter-forward"
	ChainFilterOutput      = "filter-output"
	ChainFilterOutputDNATd = "filter-output-post-dnat"
)

// Regular chains shared by all Services.
const (
	ChainServices        = "services"
	ChainMasquerading    = "masquerading"
	ChainEndpointsCheck  = "service-endpoints-check"
	ChainNodePortsCheck  = "nodeport-endpoints-check"
	ChainClusterIPsCheck = "cluster-ips-check"
	ChainReject          = "reject-chain"
)

// Sets and maps shared by all Services.
const (
	// SetClusterIPs holds every ClusterIP with a programmed Service.
	SetClusterIPs = "cluster-ips"
	// SetNodePortIPs holds the node addresses that accept node ports.
	SetNodePortIPs = "nodeport-ips"
	// SetHairpin holds "endpoint . endpoint" pairs: a pod reaching itself through a Service.
	SetHairpin = "hairpin"
	// MapServiceIPs: address . protocol . port -> service chain (single ports, hash).
	MapServiceIPs = "service-ips"
	// MapServiceRanges: address . protocol . port-range -> service chain (interval).
	MapServiceRanges = "service-ranges"
	// MapServiceAllPorts: address . protocol -> service chain (all-ports Services).
	MapServiceAllPorts = "service-allports"
	// MapNodePorts: protocol . node port (or node-port block) -> external chain (interval).
	MapNodePorts = "service-nodeports"
	// MapNoEndpointServices: address . protocol . port(-range) -> reject, Services without endpoints.
	MapNoEndpointServices = "no-endpoint-services"
	// MapNoEndpointAllPorts: address . protocol -> reject, all-ports Services without endpoints.
	MapNoEndpointAllPorts = "no-endpoint-allports"
	// MapNoEndpointNodePorts: protocol . node port(-range) -> reject.
	MapNoEndpointNodePorts = "no-endpoint-nodeports"
)

// maxNameLen keeps generated names well inside the kernel's 256-byte limit.
const maxNameLen = 200

// portHash is the first 8 characters of base32(sha256(port name)): short, stable, and unique
// enough that two ports never share a chain even when their readable suffixes are cut.
func portHash(p model.PortName) string {
	sum := sha256.Sum256([]byte(p.String()))
	return base32.StdEncoding.EncodeToString(sum[:])[:8]
}

func portObjectName(prefix string, p model.PortName) string {
	n := prefix + "-" + portHash(p) + "-" + p.String()
	if len(n) > maxNameLen {
		n = n[:maxNameLen]
	}
	return n
}

// ServiceChain names the chain that picks an endpoint for a ServicePort: "svc-HASH-ns/name/tcp/http".
func ServiceChain(p model.PortName) string { return portObjectName("svc", p) }

// ExternalChain names the chain for traffic that entered through a node port, LoadBalancer IP or
// external IP: "ext-HASH-ns/name/tcp/http".
func ExternalChain(p model.PortName) string { return portObjectName("ext", p) }

// EndpointMap names the numgen map of a ServicePort's endpoints: "ep-HASH-ns/name/tcp/http".
func EndpointMap(p model.PortName) string { return portObjectName("ep", p) }

// LocalChain names the chain that picks one of this node's endpoints (traffic policy Local):
// "local-HASH-ns/name/tcp/http".
func LocalChain(p model.PortName) string { return portObjectName("local", p) }

// LocalEndpointMap names the numgen map of the local chain: "lep-HASH-ns/name/tcp/http".
func LocalEndpointMap(p model.PortName) string { return portObjectName("lep", p) }

// FirewallChain names the chain that checks loadBalancerSourceRanges for traffic to the
// LoadBalancer IPs: "fw-HASH-ns/name/tcp/http".
func FirewallChain(p model.PortName) string { return portObjectName("fw", p) }

// SourceRangesSet names the interval set of the sources a LoadBalancer IP accepts:
// "src-HASH-ns/name/tcp/http".
func SourceRangesSet(p model.PortName) string { return portObjectName("src", p) }

// AffinitySet names the dynamic set of the clients stuck to one endpoint of a ServicePort with
// ClientIP affinity: "aff-HASH-ns/name/tcp/http__198.18.128.10/8080" (an IPv6 address with dots
// for colons, which nft names cannot hold). HASH covers the endpoint too, so a cut name stays
// unique. The set is named by the endpoint, not its position: other endpoints coming and going
// leave its clients where they are.
func AffinitySet(p model.PortName, ep netip.AddrPort) string {
	id := p.String() + "__" + strings.ReplaceAll(ep.Addr().String(), ":", ".") + "/" + strconv.Itoa(int(ep.Port()))
	sum := sha256.Sum256([]byte(id))
	n := "aff-" + base32.StdEncoding.EncodeToString(sum[:])[:8] + "-" + id
	if len(n) > maxNameLen {
		n = n[:maxNameLen]
	}
	return n
}
