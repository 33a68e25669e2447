package model

import "fmt"

// Rejection reasons: the stable labels of Rejection.Reason. They are metric label values and
// Event reasons, so they never change once released; REASONS.md explains each one and what the
// user should do.
const (
	// ReasonAnnotationSyntax: an nftproxy.io annotation does not parse (missing '=', not a
	// number, start 0, duplicate name, empty entry, all-ports not "true"/"false").
	ReasonAnnotationSyntax = "AnnotationSyntax"
	// ReasonRangeEndBeforeStart: a range ends before it starts.
	ReasonRangeEndBeforeStart = "RangeEndBeforeStart"
	// ReasonRangeEndTooLarge: a range goes past port 65535.
	ReasonRangeEndTooLarge = "RangeEndTooLarge"
	// ReasonRangeStartMismatch: a range's start differs from its ServicePort's port.
	ReasonRangeStartMismatch = "RangeStartMismatch"
	// ReasonUnknownPortName: port-ranges names a port the Service does not have.
	ReasonUnknownPortName = "UnknownPortName"
	// ReasonTargetPortRemap: a range or all-ports port has a targetPort other than its port.
	ReasonTargetPortRemap = "TargetPortRemap"
	// ReasonPortOverlap: two ports or ranges of one protocol overlap within the Service (its
	// service ports, or its node ports).
	ReasonPortOverlap = "PortOverlap"
	// ReasonAllPortsNodePort: all-ports on a Service of type NodePort.
	ReasonAllPortsNodePort = "AllPortsNodePort"
	// ReasonAllPortsHeadless: all-ports on a headless Service (clusterIP: None).
	ReasonAllPortsHeadless = "AllPortsHeadless"
	// ReasonAllPortsExternalIPs: all-ports on a Service with externalIPs.
	ReasonAllPortsExternalIPs = "AllPortsExternalIPs"
	// ReasonAllPortsWithRanges: all-ports and port-ranges on the same Service.
	ReasonAllPortsWithRanges = "AllPortsWithRanges"
	// ReasonNodePortRangeWidth: a node-port block's width differs from its port range's width.
	ReasonNodePortRangeWidth = "NodePortRangeWidth"
	// ReasonNodePortRangeUnknownName: node-port-ranges names a port that is not a port range.
	ReasonNodePortRangeUnknownName = "NodePortRangeUnknownName"
	// ReasonInvalidAddress: a clusterIP, externalIP or loadBalancerSourceRange does not parse.
	ReasonInvalidAddress = "InvalidAddress"
	// ReasonInvalidPort: a port number outside 1..65535 or a protocol other than TCP/UDP/SCTP.
	ReasonInvalidPort = "InvalidPort"
	// ReasonServiceConflict: the Service's ports overlap those of an older Service on the same
	// IP and protocol (or on the node ports).
	ReasonServiceConflict = "ServiceConflict"
	// ReasonKernelRefused: the model accepted the Service but the kernel refused one of its
	// objects when it was committed; the rest of the node was programmed without it. No input
	// is meant to produce it (names and comments fit the kernel's limits by construction), so
	// no test corpus holds a Service for it.
	ReasonKernelRefused = "KernelRefused"
	// ReasonAPIValidation: manifest mode only; the Service fails a check the API server makes on
	// its metadata or spec enums (a name or namespace that is not a DNS label, such as one with
	// '/' or NUL; labels; annotation keys; type; affinity; traffic policies).
	ReasonAPIValidation = "APIValidation"
	// ReasonNodeAddressRange: all-ports or a port range on a LoadBalancer ingress IP, an
	// external IP or a cluster IP that is an address of the node, the Node object's or the
	// kernel's (it would capture the node's own ports).
	ReasonNodeAddressRange = "NodeAddressRange"
	// ReasonNodeAddressClusterIP: a cluster IP that is one of the Node object's addresses.
	ReasonNodeAddressClusterIP = "NodeAddressClusterIP"
	// ReasonReservedPort: a port reserved for the node (--reserved-ports) used on a node
	// address: a LoadBalancer, external or cluster IP that is a node address, a node port, a
	// health-check node port or a node-port block.
	ReasonReservedPort = "ReservedPort"
	// ReasonSpecialAddress: a cluster IP, external IP or load-balancer ingress IP is an address
	// no Service may take: unspecified, loopback, link-local, multicast, 255.255.255.255 or a
	// cloud metadata address (SpecialAddress).
	ReasonSpecialAddress = "SpecialAddress"
	// ReasonClusterIPOutsideServiceCIDR: manifest mode with --service-cidr only; a cluster IP the
	// API server could not have allocated from the service CIDRs (outside them, or their network
	// address, or an IPv4 CIDR's broadcast address).
	ReasonClusterIPOutsideServiceCIDR = "ClusterIPOutsideServiceCIDR"
	// ReasonNodePortBlockOutOfRange: a node-port block outside --range-node-port-range, not
	// identity-mapped, or given while blocks are disabled.
	ReasonNodePortBlockOutOfRange = "NodePortBlockOutOfRange"
	// ReasonNodePortNotAssigned: manifest mode only; its node-port assigner could not give the
	// Service a node port, health-check node port or node-port block (taken by an older
	// Service, outside its range, range full, a shifted block). Not a whole rejection: the
	// Service is served without that port, so the model never returns it; it is counted and
	// logged once per change, and render lists it.
	ReasonNodePortNotAssigned = "NodePortNotAssigned"
	// ReasonCostLimit: the Service's rules would cost the kernel more than --max-service-cost
	// (chains, rules and elements, each named set counting fragment.SetCost); it is not
	// programmed, so it cannot stall the syncs of every other Service.
	ReasonCostLimit = "CostLimit"
)

// AllReasons lists every reason, for metric initialisation and documentation tests.
func AllReasons() []string {
	return []string{
		ReasonAnnotationSyntax, ReasonRangeEndBeforeStart, ReasonRangeEndTooLarge,
		ReasonRangeStartMismatch, ReasonUnknownPortName, ReasonTargetPortRemap, ReasonPortOverlap,
		ReasonAllPortsNodePort, ReasonAllPortsHeadless, ReasonAllPortsExternalIPs,
		ReasonAllPortsWithRanges, ReasonNodePortRangeWidth, ReasonNodePortRangeUnknownName,
		ReasonInvalidAddress, ReasonInvalidPort, ReasonServiceConflict,
		ReasonKernelRefused,
		ReasonAPIValidation,
		ReasonNodeAddressRange, ReasonNodeAddressClusterIP, ReasonReservedPort,
		ReasonNodePortBlockOutOfRange,
		ReasonNodePortNotAssigned,
		ReasonSpecialAddress, ReasonClusterIPOutsideServiceCIDR,
		ReasonCostLimit,
	}
}

// reject builds a Rejection whose message starts with the Service's key.
func reject(key ServiceKey, reason, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Message: fmt.Sprintf("service %s: ", key) + fmt.Sprintf(format, args...)}
}
