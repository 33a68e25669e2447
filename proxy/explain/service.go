package explain

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/nft/trace"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// dispatchMaps are the maps whose elements are a Service port's frontends, each commented with
// the port's name: where explain finds a Service in the kernel.
var dispatchMaps = []string{
	ruleset.MapServiceIPs, ruleset.MapServiceRanges, ruleset.MapServiceAllPorts, ruleset.MapNodePorts, ruleset.MapNodePortRanges,
	ruleset.MapNoEndpointServices, ruleset.MapNoEndpointAllPorts, ruleset.MapNoEndpointNodePorts,
}

// ServiceAnswer is what the kernel does with one Service's frontends, or why it holds none.
type ServiceAnswer struct {
	// Service is "namespace/name".
	Service string
	// Frontends are one Answer per frontend the kernel holds (a ClusterIP port, a node port on
	// the first node-port address, a LoadBalancer IP, ...), in table order.
	Frontends []Answer
	// Rejections are the daemon's reasons for not programming the Service, or part of it.
	Rejections []Rejection
	// RejectionsErr is why the daemon's rejections could not be read.
	RejectionsErr error
	// Notes are frontends the kernel holds but explain could not trace (a node port with no
	// node address to reach it on).
	Notes []string
}

// Service explains every frontend of the Service key ("namespace/name") that the kernel holds,
// each traced from src (invalid: a client outside the cluster), and looks up its rejection.
func (n *Node) Service(key string, src netip.Addr) ServiceAnswer {
	out := ServiceAnswer{Service: key, RejectionsErr: n.RejectionsErr}
	for _, r := range n.Rejections {
		if r.Service == key {
			out.Rejections = append(out.Rejections, r)
		}
	}
	seen := map[string]bool{}
	for _, rs := range n.Tables {
		for _, m := range dispatchMaps {
			for _, e := range rs.Elements[m] {
				if !strings.HasPrefix(e.Comment, key+"/") {
					continue
				}
				dst, proto, port, ok := frontendOf(rs, m, e)
				if !ok {
					if (m == ruleset.MapNodePorts || m == ruleset.MapNodePortRanges || m == ruleset.MapNoEndpointNodePorts) && len(e.Key) == 2 {
						out.Notes = append(out.Notes, fmt.Sprintf("node port %s/%d (%s): no %s node address accepts node ports (no Node object, or --nodeport-addresses matches none of its addresses)",
							trace.ProtoName(uint8(e.Key[0].Num)), e.Key[1].Num, rs.Table.Family, rs.Table.Family))
					}
					continue
				}
				id := fmt.Sprintf("%s %s %d", dst, trace.ProtoName(proto), port)
				if seen[id] {
					continue
				}
				seen[id] = true
				s := src
				if s.IsValid() && s.Is4() != dst.Is4() {
					s = netip.Addr{} // --from of the other family: an outside client of this one
				}
				out.Frontends = append(out.Frontends, n.Explain(n.Packet(s, dst, proto, port)))
			}
		}
	}
	return out
}

// frontendOf is the destination a dispatch element stands for: its address (a node port's: the
// first node-port address), protocol and port (a range's or block's first; an all-ports
// element's: port 80, standing for every port).
func frontendOf(rs *nft.Ruleset, m string, e nft.Element) (netip.Addr, uint8, uint16, bool) {
	switch m {
	case ruleset.MapNodePorts, ruleset.MapNodePortRanges, ruleset.MapNoEndpointNodePorts:
		if len(e.Key) != 2 {
			return netip.Addr{}, 0, 0, false
		}
		addrs := rs.Elements[ruleset.SetNodePortIPs]
		if len(addrs) == 0 || len(addrs[0].Key) != 1 {
			return netip.Addr{}, 0, 0, false
		}
		return addrs[0].Key[0].Addr, uint8(e.Key[0].Num), uint16(e.Key[1].Num), true
	case ruleset.MapServiceAllPorts, ruleset.MapNoEndpointAllPorts:
		if len(e.Key) != 2 {
			return netip.Addr{}, 0, 0, false
		}
		return e.Key[0].Addr, uint8(e.Key[1].Num), 80, true
	}
	if len(e.Key) != 3 {
		return netip.Addr{}, 0, 0, false
	}
	return e.Key[0].Addr, uint8(e.Key[1].Num), uint16(e.Key[2].Num), true
}

// ParseDestination reads "ADDR:PORT/PROTO" ("198.19.0.10:80/tcp", "[fd00::10]:53/udp"); the
// protocol defaults to tcp.
func ParseDestination(s string) (netip.Addr, uint8, uint16, error) {
	hp, protoText, _ := strings.Cut(s, "/")
	proto, err := parseProto(protoText)
	if err != nil {
		return netip.Addr{}, 0, 0, err
	}
	ap, err := netip.ParseAddrPort(hp)
	if err != nil {
		return netip.Addr{}, 0, 0, fmt.Errorf("%q is not ADDR:PORT/PROTO (like 198.19.0.10:80/tcp or [fd00::10]:53/udp)", s)
	}
	if ap.Port() == 0 {
		return netip.Addr{}, 0, 0, fmt.Errorf("%q: port 0 is no Service port", s)
	}
	return ap.Addr().Unmap(), proto, ap.Port(), nil
}

func parseProto(s string) (uint8, error) {
	switch strings.ToLower(s) {
	case "", "tcp":
		return unix.IPPROTO_TCP, nil
	case "udp":
		return unix.IPPROTO_UDP, nil
	case "sctp":
		return unix.IPPROTO_SCTP, nil
	}
	return 0, fmt.Errorf("protocol %q is not tcp, udp or sctp", s)
}

// rejectionsSorted lists the daemon's rejections by Service, for an answer that met none.
func (n *Node) rejectionsSorted() []Rejection {
	out := append([]Rejection(nil), n.Rejections...)
	sort.Slice(out, func(i, j int) bool { return out[i].Service < out[j].Service })
	return out
}
