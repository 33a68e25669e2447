package controller

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// wants is what one Service asks of the controller, read from its spec and annotations.
type wants struct {
	// eligible: the Service has node ports at all (policy.HasNodePorts) and carries port
	// ranges. A Service that is not eligible holds no block.
	eligible bool
	// allocates: a block missing from the annotation may be added (policy.AllocatesNew).
	allocates bool
	// ranges are the ranged ServicePorts in spec order. rangesOK is false when the port-ranges
	// annotation does not parse or names a port that is not in spec.ports: the proxies reject
	// the whole Service, so the controller keeps what it holds and changes nothing.
	ranges   []annotation.PortRange
	rangesOK bool
	// recorded are the node-port-ranges entries by port name; recordedOK is false when that
	// annotation does not parse (it is then left as written). recordedRaw is the value as
	// written, hasRecorded whether the annotation is present at all.
	recorded    map[string]annotation.PortRange
	recordedOK  bool
	recordedRaw string
	hasRecorded bool
}

// analyze reads what svc asks for.
func analyze(svc *corev1.Service) wants {
	var w wants
	w.recordedRaw, w.hasRecorded = svc.Annotations[annotation.NodePortRangesKey]
	w.recorded = map[string]annotation.PortRange{}
	w.recordedOK = true
	if w.hasRecorded {
		rs, err := annotation.ParseRanges(w.recordedRaw)
		w.recordedOK = err == nil
		for _, r := range rs {
			w.recorded[r.Name] = r
		}
	}
	rangesRaw, hasRanges := svc.Annotations[annotation.PortRangesKey]
	if !policy.HasNodePorts(svc) || !hasRanges || strings.TrimSpace(rangesRaw) == "" {
		return w
	}
	w.eligible = true
	w.allocates = policy.AllocatesNew(svc)
	rs, err := annotation.ParseRanges(rangesRaw)
	if err != nil {
		return w
	}
	byName := map[string]annotation.PortRange{}
	for _, r := range rs {
		byName[r.Name] = r
	}
	seen := map[string]bool{}
	for _, sp := range svc.Spec.Ports {
		if r, ok := byName[sp.Name]; ok && !seen[sp.Name] {
			seen[sp.Name] = true
			w.ranges = append(w.ranges, r)
		}
	}
	w.rangesOK = len(w.ranges) == len(byName)
	return w
}

// formatBlocks writes the annotation value for blocks held by ranged ports, in spec order.
func formatBlocks(ranges []annotation.PortRange, blocks map[string]allocator.Range) string {
	var out []annotation.PortRange
	for _, r := range ranges {
		if b, ok := blocks[r.Name]; ok {
			out = append(out, annotation.PortRange{Name: r.Name, Start: uint16(b.First), End: uint16(b.Last)})
		}
	}
	return annotation.FormatRanges(out)
}
