// Package model holds nftproxy's validated view of the cluster: one ServicePort per port (or port
// range, or all-ports entry) of each Service, with its endpoints already resolved to addresses and
// ports, and the node it runs on. Sources (manifest files, informers) feed Kubernetes objects in;
// the ruleset builder reads this model out. Nothing here knows about nftables.
package model

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
	"unique"
)

// Protocol is a Service port protocol.
type Protocol string

// Protocols.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// Lower returns the protocol as nft and chain names spell it ("tcp").
func (p Protocol) Lower() string {
	switch p {
	case TCP:
		return "tcp"
	case UDP:
		return "udp"
	case SCTP:
		return "sctp"
	}
	return string(p)
}

// ServiceKey names a Service.
type ServiceKey struct {
	Namespace string
	Name      string
}

// String returns "namespace/name".
func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// PortName names one port of a Service. String returns "ns/name/tcp/portname", the form used in
// chain names and comments.
type PortName struct {
	Service  ServiceKey
	Port     string // the ServicePort's name; may be empty for a single unnamed port
	Protocol Protocol
}

// String returns "ns/name/tcp/portname".
func (p PortName) String() string {
	return fmt.Sprintf("%s/%s/%s", p.Service, p.Protocol.Lower(), p.Port)
}

// Endpoint is one backend of one ServicePort.
type Endpoint struct {
	Addr netip.Addr
	// Port is the resolved target port. 0 for range and all-ports Services: the destination port
	// of the packet is kept.
	Port        uint16
	Ready       bool
	Serving     bool
	Terminating bool
	// where is the endpoint's node, zone and topology hints (Where), interned: the endpoints of
	// one node share one, and an endpoint takes 40 bytes instead of 88 (100k endpoints at 10k
	// Services × 10). The zero Handle is "none of them".
	where unique.Handle[Topology]
}

// Topology is where an endpoint runs, as its EndpointSlice says: its node, its zone, the zones
// its topology hints send it to (forZones) and the nodes they send it to (forNodes). Hints are
// comma-separated (zone and node names hold no comma) so that the struct stays comparable and
// interned as one: an endpoint holds one handle whatever its hints.
type Topology struct {
	NodeName  string
	Zone      string
	Hints     string
	NodeHints string
}

// At returns e placed on node, in zone, with the given zone hints.
func (e Endpoint) At(node, zone string, hints ...string) Endpoint {
	return e.in(Topology{NodeName: node, Zone: zone, Hints: strings.Join(hints, ",")})
}

// ForNodes returns e with the given node hints (hints.forNodes), its node, zone and zone hints
// kept.
func (e Endpoint) ForNodes(nodes ...string) Endpoint {
	t := e.Where()
	t.NodeHints = strings.Join(nodes, ",")
	return e.in(t)
}

func (e Endpoint) in(t Topology) Endpoint {
	if t == (Topology{}) {
		e.where = unique.Handle[Topology]{}
	} else {
		e.where = unique.Make(t)
	}
	return e
}

// Where is the endpoint's node, zone and hints.
func (e *Endpoint) Where() Topology {
	if e.where == (unique.Handle[Topology]{}) {
		return Topology{}
	}
	return e.where.Value()
}

// NodeName is the node the endpoint runs on ("" when its slice does not say).
func (e *Endpoint) NodeName() string { return e.Where().NodeName }

// Zone is the endpoint's zone ("" when its slice does not say).
func (e *Endpoint) Zone() string { return e.Where().Zone }

// ZoneHints are the zones the endpoint's topology hints name (forZones); nil without hints.
func (e *Endpoint) ZoneHints() []string {
	if h := e.Where().Hints; h != "" {
		return strings.Split(h, ",")
	}
	return nil
}

// NodeHints are the nodes the endpoint's topology hints name (forNodes); nil without hints.
func (e *Endpoint) NodeHints() []string {
	if h := e.Where().NodeHints; h != "" {
		return strings.Split(h, ",")
	}
	return nil
}

// ServicePort is one port of a Service as nftproxy programs it, for one IP family's addresses
// or both (each address carries its family).
type ServicePort struct {
	Name PortName
	// Port is the service port; with a port range, the first port of the range.
	Port uint16
	// PortEnd is the last port of a range (inclusive); equal to Port for a single port.
	PortEnd uint16
	// AllPorts: every port of Name.Protocol on the ClusterIPs and LoadBalancerIPs is forwarded
	// (Port and PortEnd are 0).
	AllPorts bool
	// TargetPort is the numeric target port, or 0 when TargetPortName is set (resolved per
	// endpoint) or when the port is kept (ranges, all-ports).
	TargetPort     uint16
	TargetPortName string
	// NodePort and NodePortEnd (inclusive) are the node port or node-port block; 0 if none.
	NodePort    uint16
	NodePortEnd uint16

	ClusterIPs               []netip.Addr
	ExternalIPs              []netip.Addr
	LoadBalancerIPs          []netip.Addr
	LoadBalancerSourceRanges []netip.Prefix

	ExternalTrafficLocal bool // externalTrafficPolicy: Local
	InternalTrafficLocal bool // internalTrafficPolicy: Local
	HealthCheckNodePort  uint16
	// AffinityTimeout is the ClientIP session affinity timeout; 0 means no affinity.
	AffinityTimeout time.Duration
	// PreferClose: trafficDistribution PreferClose, PreferSameZone or PreferSameNode
	// (same-zone endpoints first).
	PreferClose bool
	// PreferSameNode: trafficDistribution PreferSameNode (this node's endpoints first, then
	// same-zone ones). PreferClose is set with it.
	PreferSameNode bool

	Endpoints []Endpoint
}

// IsRange reports whether the port covers more than one port.
func (p *ServicePort) IsRange() bool { return !p.AllPorts && p.PortEnd > p.Port }

// KeepsPort reports whether traffic to the port keeps its destination port: all-ports entries
// and every port from nftproxy.io/port-ranges, a one-port range ("sip=5060-5060") included.
// Endpoints of such a port have Port 0 and are DNATed to their address only. The ruleset
// builder and the endpoint resolution both ask this, so they can never disagree on a port (a
// one-port range used to resolve its endpoints without a port and then be built as a single
// port that needs one, which dropped every endpoint).
func (p *ServicePort) KeepsPort() bool {
	return p.AllPorts || (p.TargetPort == 0 && p.TargetPortName == "")
}

// HasNodePortBlock reports whether NodePort..NodePortEnd is a node-port block (from
// nftproxy.io/node-port-ranges, identity-mapped to the port range) rather than a single node port.
func (p *ServicePort) HasNodePortBlock() bool {
	return p.NodePort != 0 && !p.AllPorts && p.KeepsPort()
}

// Rejection says why a Service, or part of it, was not programmed. Reason is a short stable
// label (used as a metric label); Message is the full sentence for logs and Events.
type Rejection struct {
	Reason  string
	Message string
	// Partial: only part of the Service is not programmed (Service.Withheld), the rest is
	// served; reporters say so, so that a half-served Service is neither hidden nor mistaken
	// for a dead one.
	Partial bool
}

// Error returns the message.
func (r *Rejection) Error() string { return r.Message }

// Service is one Service as the model holds it: its ports, or why it was rejected.
type Service struct {
	Key   ServiceKey
	Ports []ServicePort
	// Rejected is set when validation failed; Ports is then empty and nothing is programmed.
	Rejected *Rejection
	// Withheld is set when part of an accepted Service is not programmed (a port on an address
	// that an older Service holds: see ServiceConflict); Ports holds the rest, which is served.
	// Its Partial is true.
	Withheld *Rejection
}

// Node is the node nftproxy runs on.
type Node struct {
	Name      string
	Addresses []netip.Addr
	Labels    map[string]string
}

// Zone returns the node's topology.kubernetes.io/zone label ("" if unset).
func (n *Node) Zone() string {
	if n == nil {
		return ""
	}
	return n.Labels["topology.kubernetes.io/zone"]
}
