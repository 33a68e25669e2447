package allocatorctl

import (
	"fmt"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/localports"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
)

// Where the kernel publishes the ephemeral port range and the ports kept out of it.
const (
	LocalPortRangeFile     = localports.RangeFile
	LocalReservedPortsFile = localports.ReservedFile
)

// ParseLocalPortRange reads the kernel's net.ipv4.ip_local_port_range value (allocator's).
func ParseLocalPortRange(s string) (allocator.Range, error) { return allocator.ParseLocalPortRange(s) }

// ParseReservedPorts reads net.ipv4.ip_local_reserved_ports (allocator's).
func ParseReservedPorts(s string) ([]allocator.Range, error) { return allocator.ParseReservedPorts(s) }

// ReadLocalPorts reads the ephemeral port range and the reserved ports from the given files
// (normally LocalPortRangeFile and LocalReservedPortsFile), as the daemon's check does. A
// missing reserved-ports file means none are reserved.
func ReadLocalPorts(rangeFile, reservedFile string) (allocator.Range, []allocator.Range, error) {
	eph, res, err := localports.ReadFiles(rangeFile, reservedFile)
	if err != nil {
		return allocator.Range{}, nil, fmt.Errorf("%w (in a pod, run with hostNetwork to see the node's value, or pass it as a flag)", err)
	}
	return eph, res, nil
}

// CheckRanges validates the block range before the controller starts:
//   - it must not overlap the API server's --service-node-port-range, or a block could take a
//     node port the API server hands to an ordinary Service;
//   - no port of it may be ephemeral (net.ipv4.ip_local_port_range) unless reserved
//     (net.ipv4.ip_local_reserved_ports): the kernel would pick such ports as source ports of
//     the node's own connections, and those connections' replies would be sent to a pod.
func CheckRanges(blocks, nodePorts, ephemeral allocator.Range, reserved []allocator.Range) error {
	if err := blocks.Validate(); err != nil {
		return fmt.Errorf("--range-node-port-range: %w", err)
	}
	if err := nodePorts.Validate(); err != nil {
		return fmt.Errorf("--service-node-port-range: %w", err)
	}
	if blocks.Overlaps(nodePorts) {
		return fmt.Errorf("--range-node-port-range %s overlaps the API server's node-port range %s: a block would take node ports "+
			"the API server hands to other Services; choose disjoint ranges (for example %s with %s) and pass the API server's "+
			"--service-node-port-range as --service-node-port-range",
			blocks, nodePorts, nodeport.DefaultBlockRange, nodeport.DefaultNodePortRange)
	}
	if ephemeral == (allocator.Range{}) {
		return nil
	}
	if p, ok := firstUnreserved(blocks, ephemeral, reserved); ok {
		return fmt.Errorf("--range-node-port-range %s overlaps the node's ephemeral ports %s (net.ipv4.ip_local_port_range; port %d "+
			"is not in net.ipv4.ip_local_reserved_ports): the node's own connections could use a block's port as their source "+
			"port; move the block range below %d or above %d, or reserve it with net.ipv4.ip_local_reserved_ports",
			blocks, ephemeral, p, ephemeral.First, ephemeral.Last)
	}
	return nil
}

// firstUnreserved returns the first port of blocks that is ephemeral and not reserved.
func firstUnreserved(blocks, ephemeral allocator.Range, reserved []allocator.Range) (int, bool) {
	if runs := allocator.EphemeralOverlap(blocks, ephemeral, reserved); len(runs) > 0 {
		return runs[0].First, true
	}
	return 0, false
}
