package app

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/localports"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// watchLocalPorts checks this node's ephemeral ports (read in the daemon's own network
// namespace) against the node-port range, the block range and every node-port block the
// tracker accepted, now and every localports.DefaultInterval until ctx ends: a warning names
// each overlap and nftproxy_ephemeral_overlap_ports counts it. The allocator's leader checks
// only its own node, once.
func watchLocalPorts(ctx context.Context, o *Options, log logr.Logger, tracker *model.Tracker, m localports.Observer) error {
	np, err := allocator.ParseRange(o.NodePortRange)
	if err != nil {
		return usageError{fmt.Errorf("--service-node-port-range: %w", err)}
	}
	var blocks allocator.Range
	if o.BlockRange != "" {
		if blocks, err = allocator.ParseRange(o.BlockRange); err != nil {
			return usageError{fmt.Errorf("--range-node-port-range: %w", err)}
		}
	}
	c := localports.New(localports.Config{
		NodePortRange: np, BlockRange: blocks, Observer: m, Log: log.WithName("localports"),
		Blocks: func() []localports.Block { return trackerBlocks(tracker.Snapshot()) },
	})
	go c.Run(ctx)
	return nil
}

// trackerBlocks lists the node-port blocks of the Services in snap (rejected ones have no ports),
// each once even if a port appears once per IP family.
func trackerBlocks(snap model.Snapshot) []localports.Block {
	var out []localports.Block
	seen := map[localports.Block]bool{}
	for _, s := range snap.Sorted() {
		for i := range s.Ports {
			p := &s.Ports[i]
			if !p.HasNodePortBlock() {
				continue
			}
			b := localports.Block{Name: p.Name.String(), Range: allocator.Range{First: int(p.NodePort), Last: int(p.NodePortEnd)}}
			if !seen[b] {
				seen[b] = true
				out = append(out, b)
			}
		}
	}
	return out
}
