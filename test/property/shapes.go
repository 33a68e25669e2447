package property

import (
	"fmt"
	"sort"
	"strings"
)

// Shape names one odd-but-valid trait a generated Service can have. A Service has several; the
// batch records them so a failure says which traits the failing Service carried, and a test can
// keep a shape out of the generated input (Options.Exclude) while a known defect is open.
type Shape string

// Shapes the generator produces. Each is input the API server accepts.
const (
	// ShapeLongNames: namespace, name and port names longer than the short defaults, up to the
	// API's maxima (63, 63 and 15 characters); one in four is exactly at every maximum.
	ShapeLongNames Shape = "long-names"
	// ShapeManyPorts: 20 to 100 ports in one Service, every protocol mixed.
	ShapeManyPorts Shape = "many-ports"
	// ShapeRange: a port range (nftproxy.io/port-ranges) of width 2 or more.
	ShapeRange Shape = "range"
	// ShapeOnePortRange: a port range of width 1 ("p=5060-5060"), documented as valid.
	ShapeOnePortRange Shape = "one-port-range"
	// ShapeRangeTo65535: a port range ending at 65535.
	ShapeRangeTo65535 Shape = "range-to-65535"
	// ShapeAllPorts: nftproxy.io/all-ports on a ClusterIP or LoadBalancer Service.
	ShapeAllPorts Shape = "all-ports"
	// ShapeNodePortClash: a node port equal to an older Service's (same protocol); the API
	// server would refuse it, a manifest may hold it, and it must end as a ServiceConflict
	// rejection of the younger Service, never as a failed sync.
	ShapeNodePortClash Shape = "node-port-clash"
	// ShapeNodePortBlock: an identity node-port block (nftproxy.io/node-port-ranges) on a
	// NodePort range Service, in 16000-16999.
	ShapeNodePortBlock Shape = "node-port-block"
	// ShapeNodePortBlockReserved: an identity node-port block that covers the kubelet's port
	// 10250.
	ShapeNodePortBlockReserved Shape = "node-port-block-reserved"
	// ShapeNodeAddressPort: a LoadBalancer ingress IP equal to a node address (k3s ServiceLB
	// style) with single, unreserved ports: allowed, as upstream.
	ShapeNodeAddressPort Shape = "node-address-port"
	// ShapeNodeAddressReservedPort: a single port on a node-address LoadBalancer IP that is a
	// reserved port (22 or 10250).
	ShapeNodeAddressReservedPort Shape = "node-address-reserved-port"
	// ShapeNodeAddressAllPorts: all-ports on a LoadBalancer whose ingress IP is a node address
	// (a node takeover).
	ShapeNodeAddressAllPorts Shape = "node-address-all-ports"
	// ShapeNodeAddressRange: a port range covering reserved ports on a node address, through a
	// LoadBalancer ingress IP or an externalIP.
	ShapeNodeAddressRange Shape = "node-address-range"
	// ShapeSourceRangeSpaces: loadBalancerSourceRanges entries with spaces around them, which
	// the API server accepts (it trims them).
	ShapeSourceRangeSpaces Shape = "source-range-spaces"
	// ShapeSpecialAddress: a cluster IP or load-balancer ingress IP that is a special address
	// (unspecified, loopback, link-local, multicast, broadcast, cloud metadata); rejected with
	// SpecialAddress.
	ShapeSpecialAddress Shape = "special-address"
	// ShapeKernelAddress: all-ports or a port range on a cluster IP that the node's kernel holds
	// but its Node object does not list (a pod bridge's gateway); rejected with NodeAddressRange.
	ShapeKernelAddress Shape = "kernel-address"
	// ShapeIgnored: headless and ExternalName Services, which nftproxy ignores.
	ShapeIgnored Shape = "ignored"
)

// AllShapes lists every shape, for documentation and for tests that walk them.
func AllShapes() []Shape {
	return []Shape{ShapeLongNames, ShapeManyPorts, ShapeRange, ShapeOnePortRange, ShapeRangeTo65535,
		ShapeAllPorts, ShapeNodePortClash, ShapeNodePortBlock, ShapeNodePortBlockReserved,
		ShapeNodeAddressPort, ShapeNodeAddressReservedPort, ShapeNodeAddressAllPorts,
		ShapeNodeAddressRange, ShapeSourceRangeSpaces, ShapeIgnored,
		ShapeSpecialAddress, ShapeKernelAddress}
}

// Outcome is what the property requires of one Service.
type Outcome int

// Outcomes.
const (
	// Programmed: accepted by the model and present in the kernel.
	Programmed Outcome = iota
	// Rejected: rejected with Expect.Reason (any documented reason when Reason is empty).
	Rejected
	// Ignored: no model at all (headless, ExternalName).
	Ignored
	// Either: programmed, or rejected with a documented reason; the safety checks decide.
	Either
)

func (o Outcome) String() string {
	switch o {
	case Programmed:
		return "programmed"
	case Rejected:
		return "rejected"
	case Ignored:
		return "ignored"
	case Either:
		return "programmed or rejected"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// Expect is the required outcome of one generated Service.
type Expect struct {
	Outcome Outcome
	// Reason is the required rejection reason; empty accepts any documented one.
	Reason string
	// Why says which generated trait decides the outcome, for failure messages.
	Why string
}

func (e Expect) String() string {
	s := e.Outcome.String()
	if e.Reason != "" {
		s += " (" + e.Reason + ")"
	}
	if e.Why != "" {
		s += ": " + e.Why
	}
	return s
}

// shapeSet is a set of shapes with a stable text form.
type shapeSet map[Shape]bool

func (s shapeSet) String() string {
	var out []string
	for sh := range s {
		out = append(out, string(sh))
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}
