// Package conntrack deletes stale UDP conntrack entries after a sync. UDP has no connection to
// reset: a client that keeps sending from the same socket keeps matching the conntrack entry its
// first datagram created, so a flow DNAT'ed to an endpoint that has gone (or a flow created
// before the Service existed, never DNAT'ed at all) black-holes for as long as the client keeps
// talking. Deleting the entry makes the next datagram a new flow, which the ruleset sends to a
// live endpoint.
//
// The work is split in two. Targets is a pure function from the before/after model of the
// Services a sync changed to the frontends whose flows may be stale and the endpoints whose
// flows must stay. Cleaner.Cleanup dumps the kernel's table once per family and deletes every
// UDP entry whose original destination is one of those frontends and whose reply source is not
// a serving endpoint. The Hook runs both after each sync, retries a cleanup that failed (a stale
// entry that a client keeps alive never times out) and, after a full sync or when the node-port
// addresses change, sweeps every UDP Service.
package conntrack

import (
	"net/netip"
	"slices"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// Frontend is where a client sent a flow: an address and an inclusive destination port range.
type Frontend struct {
	// Addr is the Service address (ClusterIP, external IP, LoadBalancer IP) or node address.
	// The zero Addr matches every destination address: node ports when the addresses they are
	// served on are not given to Targets.
	Addr netip.Addr
	// First and Last bound the destination port (inclusive): one port, a range, 0-65535 for an
	// all-ports Service, or a node port (block).
	First, Last uint16
}

// Contains reports whether a flow to dst:port was sent to this frontend.
func (f Frontend) Contains(dst netip.Addr, port uint16) bool {
	if port < f.First || port > f.Last {
		return false
	}
	return !f.Addr.IsValid() || f.Addr == dst
}

// Target is one UDP ServicePort's frontends whose flows are stale unless they reach one of Keep.
type Target struct {
	// Port names the ServicePort, for logs.
	Port      model.PortName
	Frontends []Frontend
	// Keep lists the serving endpoints (reply sources that may stay). An AddrPort with port 0
	// keeps any port of that address: range and all-ports endpoints receive the packet's own
	// destination port.
	Keep []netip.AddrPort
}

// Change is one Service before and after a sync; nil means absent (created or deleted).
type Change struct {
	Old, New *model.Service
}

// Targets returns what a sync that made changes must clean: for every UDP ServicePort of a
// changed Service, its current frontends when the port is new, gained frontends, or lost (or
// first got) serving endpoints; and the frontends the Service no longer has, with nothing to
// keep. Ports whose frontends and serving endpoints did not change, or only gained endpoints,
// need nothing. A flow matched by several targets stays when any of them keeps its reply source,
// so a frontend passed from one Service or port to another loses only the flows that do not
// reach the new owner's endpoints.
//
// nodeAddrs are the addresses node ports are served on. With none given, a node port frontend
// matches flows to any address, as upstream kube-proxy does; with them, a flow that merely
// passes through the node to the same port elsewhere is left alone.
func Targets(nodeAddrs []netip.Addr, changes []Change) []Target {
	var out []Target
	for _, c := range changes {
		oldPorts, newPorts := udpPorts(c.Old), udpPorts(c.New)
		for _, np := range newPorts {
			op := findPort(oldPorts, np.Name)
			nf, keep := frontends(np, nodeAddrs), serving(np)
			if op == nil || !sameFrontends(frontends(op, nodeAddrs), nf) || lostOrFirst(serving(op), keep) {
				out = append(out, Target{Port: np.Name, Frontends: nf, Keep: keep})
			}
		}
		for _, op := range oldPorts {
			var nf []Frontend
			if np := findPort(newPorts, op.Name); np != nil {
				nf = frontends(np, nodeAddrs)
			}
			var gone []Frontend
			for _, f := range frontends(op, nodeAddrs) {
				if !slices.Contains(nf, f) {
					gone = append(gone, f)
				}
			}
			if len(gone) > 0 {
				out = append(out, Target{Port: op.Name, Frontends: gone})
			}
		}
	}
	return out
}

// udpPorts returns the UDP ports of s (none when s is nil or rejected).
func udpPorts(s *model.Service) []*model.ServicePort {
	if s == nil || s.Rejected != nil {
		return nil
	}
	var out []*model.ServicePort
	for i := range s.Ports {
		if s.Ports[i].Name.Protocol == model.UDP {
			out = append(out, &s.Ports[i])
		}
	}
	return out
}

func findPort(ports []*model.ServicePort, name model.PortName) *model.ServicePort {
	for _, p := range ports {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// frontends lists where clients reach sp. All-ports Services get no node ports (the ruleset
// does not program them), whatever the API server allocated.
func frontends(sp *model.ServicePort, nodeAddrs []netip.Addr) []Frontend {
	first, last := sp.Port, max(sp.PortEnd, sp.Port)
	if sp.AllPorts {
		first, last = 0, 65535
	}
	var out []Frontend
	for _, list := range [][]netip.Addr{sp.ClusterIPs, sp.ExternalIPs, sp.LoadBalancerIPs} {
		for _, a := range list {
			out = append(out, Frontend{Addr: a.Unmap(), First: first, Last: last})
		}
	}
	if sp.NodePort != 0 && !sp.AllPorts {
		nf, nl := sp.NodePort, max(sp.NodePortEnd, sp.NodePort)
		if len(nodeAddrs) == 0 {
			out = append(out, Frontend{First: nf, Last: nl})
		}
		for _, a := range nodeAddrs {
			out = append(out, Frontend{Addr: a.Unmap(), First: nf, Last: nl})
		}
	}
	return out
}

// serving returns the reply sources that may stay: serving endpoints (ready ones, and
// terminating ones that still serve), as the ruleset may send new flows to either.
func serving(sp *model.ServicePort) []netip.AddrPort {
	var out []netip.AddrPort
	for _, ep := range sp.Endpoints {
		if ep.Serving || ep.Ready {
			out = append(out, netip.AddrPortFrom(ep.Addr.Unmap(), ep.Port))
		}
	}
	return out
}

func sameFrontends(a, b []Frontend) bool {
	if len(a) != len(b) {
		return false
	}
	for _, f := range a {
		if !slices.Contains(b, f) {
			return false
		}
	}
	return true
}

// lostOrFirst reports whether some endpoint of before is missing from after, or the port got its
// first serving endpoint (flows sent while it had none were never DNAT'ed).
func lostOrFirst(before, after []netip.AddrPort) bool {
	if len(before) == 0 {
		return len(after) > 0
	}
	have := make(map[netip.AddrPort]struct{}, len(after))
	for _, ep := range after {
		have[ep] = struct{}{}
	}
	for _, ep := range before {
		if _, ok := have[ep]; !ok {
			return true
		}
	}
	return false
}
