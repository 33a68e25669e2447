package allocator

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// The kernel's ephemeral ports (net.ipv4.ip_local_port_range, less
// net.ipv4.ip_local_reserved_ports) are the source ports it picks for the node's own outgoing
// connections. A node port or a node-port block inside them breaks those connections: their
// replies match the Service's rule and are sent to a pod. The allocator's leader checks its
// block range against them before it starts, and every node checks its own ranges and blocks
// while it runs (the sysctls are per node and per network namespace); both ask EphemeralOverlap.

// ParseLocalPortRange reads the kernel's net.ipv4.ip_local_port_range value ("32768\t60999").
func ParseLocalPortRange(s string) (Range, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return Range{}, fmt.Errorf("ip_local_port_range %q: want two numbers, the first and last ephemeral port", strings.TrimSpace(s))
	}
	return ParseRange(f[0] + "-" + f[1])
}

// ParseReservedPorts reads net.ipv4.ip_local_reserved_ports ("1000-2000,3000"; empty: none).
func ParseReservedPorts(s string) ([]Range, error) {
	var out []Range
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
		r, err := ParseRange(e)
		if err != nil {
			return nil, fmt.Errorf("ip_local_reserved_ports entry %q: %w", e, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// EphemeralOverlap returns the ports of r the kernel may pick as ephemeral source ports: those
// inside ephemeral and inside none of reserved, as ordered, disjoint runs. None (nil) means r is
// safe. A zero ephemeral range (unknown) overlaps nothing.
func EphemeralOverlap(r, ephemeral Range, reserved []Range) []Range {
	if ephemeral == (Range{}) || r == (Range{}) || !r.Overlaps(ephemeral) {
		return nil
	}
	lo, hi := max(r.First, ephemeral.First), min(r.Last, ephemeral.Last)
	res := append([]Range(nil), reserved...)
	sort.Slice(res, func(i, j int) bool { return res[i].First < res[j].First })
	var out []Range
	for _, x := range res {
		if x.Last < lo || x.First > hi {
			continue
		}
		if x.First > lo {
			out = append(out, Range{First: lo, Last: x.First - 1})
		}
		if x.Last >= hi {
			return out
		}
		lo = max(lo, x.Last+1)
	}
	return append(out, Range{First: lo, Last: hi})
}

// RangesSize is the number of ports in runs (as EphemeralOverlap returns them: disjoint).
func RangesSize(runs []Range) int {
	n := 0
	for _, r := range runs {
		n += r.Size()
	}
	return n
}
