package lab

import (
	"fmt"
	"net/netip"
)

// The address plan. Every data-plane test uses the same fixed addresses, so a failure message
// reads the same in every test: 198.18.x.x is a host (client, node, pod), 198.19.x.x is a
// service address that only exists as nftproxy's DNAT. IPv6 mirrors IPv4 textually: pod-1 is
// 198.18.128.11 and fd00:128::11, ClusterIP 198.19.0.7 pairs with fd00:19::7.
//
// Service ranges do not overlap each other: the ClusterIP range (the service CIDR a daemon is
// configured with) stops at 198.19.63.255, so "drop traffic to unallocated ClusterIPs" never
// catches a LoadBalancer or external IP.
const (
	// UplinkCIDRv4 is the node's own network ("eth0" of a real node). The node is .1; the
	// default gateway .2 lives in a namespace that silently drops what it is not addressed to,
	// the way an upstream router blackholes unknown traffic.
	UplinkCIDRv4 = "198.18.0.0/24"
	// UplinkCIDRv6 is the IPv6 twin of UplinkCIDRv4.
	UplinkCIDRv6 = "fd00::/64"
	// NodeIPv4 is the node's primary address (on the uplink). NodePorts are tested on it;
	// clients reach it through their own link to the node.
	NodeIPv4 = "198.18.0.1"
	// NodeIPv6 is the node's primary IPv6 address.
	NodeIPv6 = "fd00::1"
	// UplinkGatewayV4 is the node's default gateway (a blackhole for anything not its own).
	UplinkGatewayV4 = "198.18.0.2"
	// UplinkGatewayV6 is the node's IPv6 default gateway.
	UplinkGatewayV6 = "fd00::2"

	// PodCIDRv4 is the pod network on the node's bridge (the cluster CIDR of this node).
	PodCIDRv4 = "198.18.128.0/24"
	// PodCIDRv6 is the IPv6 pod network.
	PodCIDRv6 = "fd00:128::/64"
	// PodGatewayV4 is the bridge's address, every pod's default gateway.
	PodGatewayV4 = "198.18.128.1"
	// PodGatewayV6 is the bridge's IPv6 address.
	PodGatewayV6 = "fd00:128::1"
	// BridgeName is the pod bridge in the node namespace.
	BridgeName = "cbr0"

	// ServiceCIDRv4 is the ClusterIP range (a daemon's --service-cidr in lab tests).
	ServiceCIDRv4 = "198.19.0.0/18"
	// ServiceCIDRv6 is the IPv6 ClusterIP range.
	ServiceCIDRv6 = "fd00:19::/112"
	// LoadBalancerCIDRv4 holds LoadBalancer ingress IPs.
	LoadBalancerCIDRv4 = "198.19.100.0/24"
	// LoadBalancerCIDRv6 holds IPv6 LoadBalancer ingress IPs.
	LoadBalancerCIDRv6 = "fd00:19:100::/112"
	// ExternalIPCIDRv4 holds Service externalIPs.
	ExternalIPCIDRv4 = "198.19.200.0/24"
	// ExternalIPCIDRv6 holds IPv6 Service externalIPs.
	ExternalIPCIDRv6 = "fd00:19:200::/112"

	// MaxPods is how many pods fit the pod network after the gateway (.11 to .254).
	MaxPods = 244
	// MaxClients bounds the client links (198.18.1.0/24 to 198.18.99.0/24).
	MaxClients = 99
)

// PodIPv4 is the address of pod-n (n from 1): 198.18.128.(10+n).
func PodIPv4(n int) netip.Addr { return v4(198, 18, 128, 10+n, n, MaxPods) }

// PodIPv6 is the IPv6 address of pod-n: fd00:128::(10+n), written with the same digits.
func PodIPv6(n int) netip.Addr { return v6("fd00:128::%d", 10+n, n, MaxPods) }

// ClientIPv4 is the address of client-n (n from 1): 198.18.n.2.
func ClientIPv4(n int) netip.Addr { return v4(198, 18, n, 2, n, MaxClients) }

// ClientIPv6 is the IPv6 address of client-n: fd00:n::2.
func ClientIPv6(n int) netip.Addr { return v6("fd00:%d::2", n, n, MaxClients) }

// ClientGatewayV4 is the node's address on client-n's link: 198.18.n.1. It is a node IP too.
func ClientGatewayV4(n int) netip.Addr { return v4(198, 18, n, 1, n, MaxClients) }

// ClientGatewayV6 is the node's IPv6 address on client-n's link: fd00:n::1.
func ClientGatewayV6(n int) netip.Addr { return v6("fd00:%d::1", n, n, MaxClients) }

// ClusterIPv4 is ClusterIP number n (1 to 254): 198.19.0.n.
func ClusterIPv4(n int) netip.Addr { return v4(198, 19, 0, n, n, 254) }

// ClusterIPv6 is IPv6 ClusterIP number n: fd00:19::n (same digits as ClusterIPv4).
func ClusterIPv6(n int) netip.Addr { return v6("fd00:19::%d", n, n, 254) }

// LoadBalancerIPv4 is LoadBalancer ingress IP number n (1 to 254): 198.19.100.n.
func LoadBalancerIPv4(n int) netip.Addr { return v4(198, 19, 100, n, n, 254) }

// LoadBalancerIPv6 is IPv6 LoadBalancer ingress IP number n: fd00:19:100::n.
func LoadBalancerIPv6(n int) netip.Addr { return v6("fd00:19:100::%d", n, n, 254) }

// ExternalIPv4 is external IP number n (1 to 254): 198.19.200.n.
func ExternalIPv4(n int) netip.Addr { return v4(198, 19, 200, n, n, 254) }

// ExternalIPv6 is IPv6 external IP number n: fd00:19:200::n.
func ExternalIPv6(n int) netip.Addr { return v6("fd00:19:200::%d", n, n, 254) }

// v4 builds a.b.c.d after checking that the plan index n is within 1..max; an index outside
// the plan is a bug in the test, so it panics like netip.MustParseAddr.
func v4(a, b, c, d, n, max int) netip.Addr {
	checkIndex(n, max)
	return netip.AddrFrom4([4]byte{byte(a), byte(b), byte(c), byte(d)})
}

// v6 formats the decimal digits of x into format and parses the result as hex, which is what
// keeps IPv6 addresses textually equal to their IPv4 twins.
func v6(format string, x, n, max int) netip.Addr {
	checkIndex(n, max)
	return netip.MustParseAddr(fmt.Sprintf(format, x))
}

func checkIndex(n, max int) {
	if n < 1 || n > max {
		panic(fmt.Sprintf("lab: address plan index %d outside 1..%d", n, max))
	}
}
