package app

import (
	"fmt"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
)

// newAssigner builds manifest mode's node-port control plane from the flags. obs may be nil.
func newAssigner(o *Options, log logr.Logger, obs allocator.Observer) (*nodeport.Assigner, error) {
	np, err := allocator.ParseRange(o.NodePortRange)
	if err != nil {
		return nil, usageError{fmt.Errorf("--service-node-port-range: %w", err)}
	}
	cfg := nodeport.Config{NodePortRange: np, StateDir: o.StateDir, Observer: obs}
	if o.BlockRange != "" {
		if cfg.BlockRange, err = allocator.ParseRange(o.BlockRange); err != nil {
			return nil, usageError{fmt.Errorf("--range-node-port-range: %w", err)}
		}
	}
	a, err := nodeport.New(cfg, log.WithName("nodeports"))
	if err != nil {
		return nil, fmt.Errorf("node-port assignment: %w", err)
	}
	return a, nil
}

// assign fills in the node ports of freshly loaded Services before they reach the model. A
// Service that cannot get a port is served without it; the reason is logged.
func assign(a *nodeport.Assigner, log logr.Logger, objs *manifest.Objects, ferrs []manifest.FileError) []nodeport.Problem {
	probs, err := a.Assign(objs, ferrs)
	for _, p := range probs {
		log.Error(p, "node port not assigned; the Service is served without it", "service", p.Service, "port", p.Port)
	}
	if err != nil {
		log.Error(err, "node-port assignments not saved; retrying at the next change (check --state-dir)")
	}
	return probs
}
