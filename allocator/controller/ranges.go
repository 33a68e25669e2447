package controller

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
)

// Where the kernel publishes the ephemeral port range and the ports kept out of it.
const (
	LocalPortRangeFile     = "/proc/sys/net/ipv4/ip_local_port_range"
	LocalReservedPortsFile = "/proc/sys/net/ipv4/ip_local_reserved_ports"
)

// ParseLocalPortRange reads the kernel's net.ipv4.ip_local_port_range value ("32768\t60999").
func ParseLocalPortRange(s string) (allocator.Range, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return allocator.Range{}, fmt.Errorf("ip_local_port_range %q: want two numbers, the first and last ephemeral port", strings.TrimSpace(s))
	}
	return allocator.ParseRange(f[0] + "-" + f[1])
}

// ParseReservedPorts reads net.ipv4.ip_local_reserved_ports ("1000-2000,3000"; empty: none).
func ParseReservedPorts(s string) ([]allocator.Range, error) {
	var out []allocator.Range
	for _, e := range strings.Split(strings.TrimSpace(s), ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if !strings.Contains(e, "-") {
			if _, err := strconv.Atoi(e); err != nil {
				return nil, fmt.Errorf("ip_local_reserved_ports entry %q is not a port or a range", e)
			}
			e = e + "-" + e
		}
		r, err := allocator.ParseRange(e)
		if err != nil {
			return nil, fmt.Errorf("ip_local_reserved_ports entry %q: %w", e, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// ReadLocalPorts reads the ephemeral port range and the reserved ports from the given files
// (normally LocalPortRangeFile and LocalReservedPortsFile). A missing reserved-ports file means
// none are reserved.
func ReadLocalPorts(rangeFile, reservedFile string) (allocator.Range, []allocator.Range, error) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return allocator.Range{}, nil, fmt.Errorf("read the node's ephemeral port range: %w (in a pod, run with hostNetwork to see the node's value, or pass it as a flag)", err)
	}
	eph, err := ParseLocalPortRange(string(b))
	if err != nil {
		return allocator.Range{}, nil, fmt.Errorf("%s: %w", rangeFile, err)
	}
	if reservedFile == "" {
		return eph, nil, nil
	}
	b, err = os.ReadFile(reservedFile)
	if os.IsNotExist(err) {
		return eph, nil, nil
	}
	if err != nil {
		return allocator.Range{}, nil, fmt.Errorf("read the node's reserved ports: %w", err)
	}
	res, err := ParseReservedPorts(string(b))
	if err != nil {
		return allocator.Range{}, nil, fmt.Errorf("%s: %w", reservedFile, err)
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
	if !blocks.Overlaps(ephemeral) {
		return 0, false
	}
	lo, hi := max(blocks.First, ephemeral.First), min(blocks.Last, ephemeral.Last)
	for p := lo; p <= hi; p++ {
		covered := false
		for _, r := range reserved {
			if r.Contains(p) {
				covered = true
				p = min(r.Last, hi) // skip the reserved run; the loop adds one
				break
			}
		}
		if !covered {
			return p, true
		}
	}
	return 0, false
}
