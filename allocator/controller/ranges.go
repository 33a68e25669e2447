package controller

import (
	"fmt"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/localports"
)

// ReadLocalPorts reads the ephemeral port range and the reserved ports from the given files
// (normally localports.RangeFile and localports.ReservedFile), as the daemon's check does. A
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
	if err := policy.CheckDisjoint(blocks, nodePorts); err != nil {
		return fmt.Errorf("%w; pass the API server's --service-node-port-range as --service-node-port-range", err)
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
