package model

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// DefaultReservedPorts is the default of --reserved-ports: ports of the node that no Service may
// capture or refuse on a node address. SSH (22), etcd's client, peer and metrics ports
// (2379-2381), the API server (6443), and 10248-10259: the kubelet (10248 healthz, 10250 API,
// 10255 read-only), kube-proxy or nftproxy (10249 metrics, 10256 healthz), the controller-manager
// (10257) and the scheduler (10259), with the ports between them that older releases used and
// nftproxy's health-check listener (10253).
const DefaultReservedPorts = "22,2379-2381,6443,10248-10259"

// PortSpan is an inclusive interval of port numbers (First == Last for one port).
type PortSpan struct {
	First, Last uint16
}

// Contains reports whether p is in the span.
func (s PortSpan) Contains(p uint16) bool { return s.First <= p && p <= s.Last }

// IsZero reports whether the span is unset.
func (s PortSpan) IsZero() bool { return s == PortSpan{} }

func (s PortSpan) overlaps(lo, hi uint16) bool { return s.First <= hi && lo <= s.Last }

// String returns "22" or "2379-2381".
func (s PortSpan) String() string {
	if s.First == s.Last {
		return strconv.Itoa(int(s.First))
	}
	return fmt.Sprintf("%d-%d", s.First, s.Last)
}

// ParsePortSpans reads a comma-separated list of ports and inclusive ranges ("22,2379-2381"),
// the syntax of --reserved-ports. Spaces around entries are allowed; an empty string is no span.
func ParsePortSpans(s string) ([]PortSpan, error) {
	var out []PortSpan
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(f, "-")
		if !isRange {
			hi = lo
		}
		a, errA := strconv.ParseUint(strings.TrimSpace(lo), 10, 16)
		b, errB := strconv.ParseUint(strings.TrimSpace(hi), 10, 16)
		if errA != nil || errB != nil || a < 1 || b < a {
			return nil, fmt.Errorf("%q is not a port (1-65535) or a range of ports like 2379-2381", f)
		}
		out = append(out, PortSpan{uint16(a), uint16(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First < out[j].First })
	return out, nil
}

// FormatPortSpans is the inverse of ParsePortSpans.
func FormatPortSpans(spans []PortSpan) string {
	parts := make([]string, len(spans))
	for i, s := range spans {
		parts[i] = s.String()
	}
	return strings.Join(parts, ",")
}

// GuardConfig is what every Service is checked against on this node, so that no Service can
// take over or lock out the node itself (see the node-address guard in the README).
type GuardConfig struct {
	// ReservedPorts are ports of the node (SSH, the kubelet, the API server, etcd, nftproxy's
	// own...) that no Service may capture or reject on a node address: not with a LoadBalancer
	// or external IP that is a node address, not with a node port, a health-check node port or
	// a node-port block. They apply to every protocol.
	ReservedPorts []PortSpan
	// BlockRange is where node-port blocks (nftproxy.io/node-port-ranges) may lie. The zero
	// span allows no block at all (blocks are disabled).
	BlockRange PortSpan
	// ServiceCIDRs, when set, are where every cluster IP must be allocatable from (inside one,
	// neither its network address nor an IPv4 CIDR's broadcast address), as the API server
	// allocates them. Manifest mode sets them from --service-cidr: nothing else stands between a
	// hand-written clusterIP and the kernel. Kubernetes mode leaves them empty: the API server
	// allocated the address already, from any of the cluster's ServiceCIDR objects (several
	// since ServiceCIDR went GA in 1.33), which --service-cidr need not list.
	ServiceCIDRs []netip.Prefix
}

// reserved returns the first reserved span overlapping lo-hi.
func (g *GuardConfig) reserved(lo, hi uint16) (PortSpan, bool) {
	for _, r := range g.ReservedPorts {
		if r.overlaps(lo, hi) {
			return r, true
		}
	}
	return PortSpan{}, false
}

// AddressOrigin says where a node address was seen (bits).
type AddressOrigin uint8

// Where node addresses come from.
const (
	FromNodeObject AddressOrigin = 1 << iota // the Node's InternalIP/ExternalIP
	FromKernel                               // held locally in nftproxy's network namespace
)

// NodeAddresses is the set of the node's addresses: the Node object's and those the kernel
// holds locally in nftproxy's network namespace; the value is where each was seen (never 0).
type NodeAddresses map[netip.Addr]AddressOrigin

// fromNodeObject reports whether a is one of the Node object's addresses. A cluster IP there
// is refused outright: the Node's addresses are how the cluster reaches the node.
func (n NodeAddresses) fromNodeObject(a netip.Addr) bool {
	return n[a]&FromNodeObject != 0
}

// addressesOf lists every address a Service names (cluster, external and LoadBalancer IPs),
// deduplicated; the tracker indexes Services by them to rebuild those a node-address change
// concerns.
func addressesOf(s *Service) []netip.Addr {
	if s == nil {
		return nil
	}
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for i := range s.Ports {
		p := &s.Ports[i]
		for _, ips := range [][]netip.Addr{p.ClusterIPs, p.ExternalIPs, p.LoadBalancerIPs} {
			for _, a := range ips {
				if !seen[a] {
					seen[a] = true
					out = append(out, a)
				}
			}
		}
	}
	return out
}

// guardService checks an accepted Service against the node: it returns s unchanged, or a
// rejected Service saying which port would have taken over or locked out the node. The whole
// Service is rejected, as for every other reason, so the problem is reported rather than
// half-served.
func guardService(s *Service, node NodeAddresses, g *GuardConfig) *Service {
	if s == nil || s.Rejected != nil {
		return s
	}
	for i := range s.Ports {
		if rej := guardPort(s.Key, &s.Ports[i], node, g); rej != nil {
			return &Service{Key: s.Key, Rejected: rej}
		}
	}
	return s
}

func guardPort(key ServiceKey, p *ServicePort, node NodeAddresses, g *GuardConfig) *Rejection {
	for _, a := range p.ClusterIPs {
		if node.fromNodeObject(a) {
			return reject(key, ReasonNodeAddressClusterIP,
				"port %q: cluster IP %s is an address of this node; a cluster IP must come from the service CIDR, so change it",
				p.Name.Port, a)
		}
	}
	// Every address the node holds, whichever field names it: all-ports or a range there would
	// capture the node's own ports (SSH on a pod bridge's gateway address included), and a
	// reserved port would capture or lock out that port of the node. A cluster IP the kernel
	// holds (not the Node object's) stays usable for other single ports: kube-proxy's IPVS mode
	// leaves every cluster IP on its kube-ipvs0 device.
	for _, f := range []struct {
		field string
		ips   []netip.Addr
	}{{"cluster IP", p.ClusterIPs}, {"status.loadBalancer.ingress IP", p.LoadBalancerIPs}, {"externalIP", p.ExternalIPs}} {
		for _, a := range f.ips {
			if node[a] == 0 {
				continue
			}
			switch {
			case p.AllPorts:
				return reject(key, ReasonNodeAddressRange,
					"%s: %s %s is an address of this node, and all-ports there would forward every port of the node (SSH, the kubelet...) to the pods; use an address that is not a node's, or drop %s",
					annotation.AllPortsKey, f.field, a, annotation.AllPortsKey)
			case p.IsRange():
				return reject(key, ReasonNodeAddressRange,
					"port %q (%s %d-%d): %s %s is an address of this node, and a port range there would capture the node's own ports; use an address that is not a node's, or single ports",
					p.Name.Port, p.Name.Protocol, p.Port, p.PortEnd, f.field, a)
			}
			if r, ok := g.reserved(p.Port, p.PortEnd); ok {
				return reject(key, ReasonReservedPort,
					"port %q (%s %d): %s %s is an address of this node and port %d is reserved for the node (--reserved-ports %s); use another port or an address that is not a node's",
					p.Name.Port, p.Name.Protocol, p.Port, f.field, a, p.Port, r)
			}
		}
	}
	// After the node-address checks: what would capture the node is the first thing to report.
	if a, why := clusterIPOutside(p.ClusterIPs, g.ServiceCIDRs); a.IsValid() {
		return reject(key, ReasonClusterIPOutsideServiceCIDR,
			"port %q: cluster IP %s %s (--service-cidr %s); the API server would not have allocated it, so choose one inside the service CIDR",
			p.Name.Port, a, why, formatPrefixes(g.ServiceCIDRs))
	}
	if p.NodePort != 0 && !p.AllPorts {
		if p.HasNodePortBlock() {
			if rej := guardBlock(key, p, g); rej != nil {
				return rej
			}
		} else if r, ok := g.reserved(p.NodePort, p.NodePortEnd); ok {
			return reject(key, ReasonReservedPort,
				"port %q: node port %d is reserved for the node (--reserved-ports %s); choose a node port in the node-port range",
				p.Name.Port, p.NodePort, r)
		}
	}
	if hc := p.HealthCheckNodePort; hc != 0 {
		if r, ok := g.reserved(hc, hc); ok {
			return reject(key, ReasonReservedPort,
				"healthCheckNodePort %d is reserved for the node (--reserved-ports %s); choose one in the node-port range",
				hc, r)
		}
	}
	return nil
}

func formatPrefixes(ps []netip.Prefix) string {
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

// guardBlock checks a node-port block: identity-mapped (the block is the port range itself),
// inside the block range, and off the reserved ports. Blocks are identity-mapped because the
// destination port is kept; a shifted block would send node port N to pod port N.
func guardBlock(key ServiceKey, p *ServicePort, g *GuardConfig) *Rejection {
	block := PortSpan{p.NodePort, p.NodePortEnd}
	if block != (PortSpan{p.Port, p.PortEnd}) {
		return reject(key, ReasonNodePortBlockOutOfRange,
			"port %q: %s block %s is not the port range %d-%d itself; blocks are identity-mapped (node port p reaches pod port p), so write %s=%d-%d or remove the entry",
			p.Name.Port, annotation.NodePortRangesKey, block, p.Port, p.PortEnd, p.Name.Port, p.Port, p.PortEnd)
	}
	if g.BlockRange.IsZero() {
		return reject(key, ReasonNodePortBlockOutOfRange,
			"port %q: %s block %s, but node-port blocks are disabled on this node (--range-node-port-range is empty); remove the entry or set the flag",
			p.Name.Port, annotation.NodePortRangesKey, block)
	}
	if r, ok := g.reserved(block.First, block.Last); ok {
		return reject(key, ReasonReservedPort,
			"port %q: %s block %s contains port(s) %s reserved for the node (--reserved-ports); move the port range off them or remove the entry",
			p.Name.Port, annotation.NodePortRangesKey, block, r)
	}
	if !g.BlockRange.Contains(block.First) || !g.BlockRange.Contains(block.Last) {
		return reject(key, ReasonNodePortBlockOutOfRange,
			"port %q: %s block %s is outside the node-port block range %s (--range-node-port-range); move the port range into it or remove the entry",
			p.Name.Port, annotation.NodePortRangesKey, block, g.BlockRange)
	}
	return nil
}
