package ruleset

import (
	"fmt"
	"math/bits"
	"net/netip"

	"github.com/nftproxy/nftproxy/nft"
)

// Config is what the builder needs besides the model. One Config per IP family.
type Config struct {
	Family nft.Family
	// Table is the table name; empty means DefaultTable.
	Table string
	// MasqueradeMark and DropMark are single-bit masks of skb->mark (default 0x4000 and 0x8000).
	MasqueradeMark uint32
	DropMark       uint32
	// MasqueradeAll masquerades all traffic to Services, not only traffic from outside the cluster.
	MasqueradeAll bool
	// ClusterCIDRs are the pod networks; traffic from elsewhere to a ClusterIP is masqueraded.
	// Prefixes of the other family are ignored.
	ClusterCIDRs []netip.Prefix
	// ServiceCIDRs, when given, make traffic to addresses in them that no Service owns drop.
	ServiceCIDRs []netip.Prefix
	// NodePortCIDRs restrict node ports to node addresses inside them; empty means every
	// address of the Node (never loopback).
	NodePortCIDRs []netip.Prefix
	// NodeName selects local endpoints.
	NodeName string
	// HealthCheckPort is the port of nftproxy's own health-check listener (--health-check-port):
	// TCP to a node-port address on a Service's health-check node port is redirected there,
	// unless a socket of the node holds that port (kube-proxy's listener during a handover).
	// 0: no health-check rules (the node ports are not served).
	HealthCheckPort uint16
	// AffinityMapSize bounds the shared ClientIP affinity maps (ip tables): at most this many
	// client . frontend entries each; 0 means DefaultAffinityMapSize. A full map costs only
	// stickiness: new clients are still spread, unrecorded.
	AffinityMapSize uint32
	// EndpointShards is how many maps each endpoint map is split into (README.md, "Endpoint map
	// shards"); 0 means DefaultEndpointShards. Tests set 1 to put every Service in one shard.
	EndpointShards int
}

// DefaultEndpointShards is the default number of shards of each endpoint map
// (bench/README.md, section B, has the measurements that chose it).
const DefaultEndpointShards = 64

// MaxEndpointShards bounds EndpointShards: each shard is four named sets in each table.
const MaxEndpointShards = 256

func (c *Config) endpointShards() int {
	if c.EndpointShards == 0 {
		return DefaultEndpointShards
	}
	return c.EndpointShards
}

// DefaultAffinityMapSize is the default bound of each shared affinity map: 262,144 client .
// frontend entries (bench/README.md gives the kernel memory an entry takes).
const DefaultAffinityMapSize = 1 << 18

func (c *Config) affinityMapSize() uint32 {
	if c.AffinityMapSize == 0 {
		return DefaultAffinityMapSize
	}
	return c.AffinityMapSize
}

// BitMask turns a bit number (0..31) into a mark mask; it is the flag-parsing helper for
// --masquerade-bit and --drop-bit.
func BitMask(bit int) (uint32, error) {
	if bit < 0 || bit > 31 {
		return 0, fmt.Errorf("mark bit %d out of range: use a bit number from 0 to 31", bit)
	}
	return 1 << uint(bit), nil
}

// Validate checks the marks and the prefixes.
func (c *Config) Validate() error {
	if c.Family != nft.IPv4 && c.Family != nft.IPv6 {
		return fmt.Errorf("ruleset config: family %v: use ip or ip6", c.Family)
	}
	if bits.OnesCount32(c.MasqueradeMark) != 1 {
		return fmt.Errorf("ruleset config: masquerade mark %#x must have exactly one bit set", c.MasqueradeMark)
	}
	if bits.OnesCount32(c.DropMark) != 1 {
		return fmt.Errorf("ruleset config: drop mark %#x must have exactly one bit set", c.DropMark)
	}
	if c.MasqueradeMark == c.DropMark {
		return fmt.Errorf("ruleset config: masquerade and drop marks are both %#x: give them different bits", c.DropMark)
	}
	if c.EndpointShards < 0 || c.EndpointShards > MaxEndpointShards {
		return fmt.Errorf("ruleset config: endpoint shards %d: use 1 to %d (0: %d)", c.EndpointShards, MaxEndpointShards, DefaultEndpointShards)
	}
	return nil
}

func (c *Config) table() nft.Table {
	name := c.Table
	if name == "" {
		name = DefaultTable
	}
	return nft.Table{Family: c.Family, Name: name}
}

// ofFamily keeps the addresses of the config's family.
func (c *Config) ofFamily(addrs []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, a := range addrs {
		a = a.Unmap()
		if a.IsValid() && a.Is4() == (c.Family == nft.IPv4) {
			out = append(out, a)
		}
	}
	return out
}

func (c *Config) prefixesOfFamily(ps []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.IsValid() && p.Addr().Is4() == (c.Family == nft.IPv4) {
			out = append(out, p.Masked())
		}
	}
	return out
}
