package policy

import (
	"testing"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// TestDefaultBlockRangeIsSafe: blocks are identity-mapped, so the default block range is the set
// of ports a Service may open on every node address. It must hold no reserved port of the node
// (the former default 1024-29999 held 2379, 6443 and 10250), nor overlap the API server's
// node-port range or the kernel's default ephemeral range (32768-60999).
func TestDefaultBlockRangeIsSafe(t *testing.T) {
	blocks := allocator.MustParseRange(DefaultBlockRange)
	reserved, err := model.ParsePortSpans(model.DefaultReservedPorts)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reserved {
		if blocks.Overlaps(allocator.Range{First: int(r.First), Last: int(r.Last)}) {
			t.Errorf("default block range %s holds reserved port(s) %s", blocks, r)
		}
	}
	for _, other := range []string{DefaultNodePortRange, "32768-60999"} {
		if o := allocator.MustParseRange(other); blocks.Overlaps(o) {
			t.Errorf("default block range %s overlaps %s", blocks, o)
		}
	}
}
