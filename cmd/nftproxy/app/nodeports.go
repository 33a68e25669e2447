package app

import (
	"fmt"
	"math/rand/v2"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/proxy/manifest/pipeline"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
)

// newAssigner builds manifest mode's node-port control plane from the flags. obs may be nil.
func newAssigner(o *Options, log logr.Logger, obs allocator.Observer) (*nodeport.Assigner, error) {
	return newAssignerWith(o, log, obs, func(*nodeport.Config) {})
}

// renderSeed seeds render's dynamic node-port picks: the same manifests (and state directory)
// print the same node ports on every render.
const renderSeed = 0x6e667470 // "nftp"

// newRenderAssigner is render's assigner: it reads --state-dir without writing it (the node
// ports a run with that directory holds) and picks the missing ones from a fixed seed.
func newRenderAssigner(o *Options, log logr.Logger) (*nodeport.Assigner, error) {
	return newAssignerWith(o, log, nil, func(c *nodeport.Config) {
		c.ReadOnly = true
		c.Rand = rand.New(rand.NewPCG(renderSeed, renderSeed))
	})
}

func newAssignerWith(o *Options, log logr.Logger, obs allocator.Observer, edit func(*nodeport.Config)) (*nodeport.Assigner, error) {
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
	edit(&cfg)
	a, err := nodeport.New(cfg, log.WithName("nodeports"))
	if err != nil {
		return nil, fmt.Errorf("node-port assignment: %w", err)
	}
	return a, nil
}

// newPipeline builds manifest mode's one path from --manifests to tracker (load, assign node
// ports with a, feed), used alike by run, run --once and render. pm may be nil; it counts each
// node port not assigned, once per change, as it counts rejections.
func newPipeline(o *Options, log logr.Logger, a *nodeport.Assigner, tracker *model.Tracker, pm *metrics.Proxy) *pipeline.Pipeline {
	cfg := pipeline.Config{Dir: o.Manifests, Loader: o.loader(), Assigner: a, Tracker: tracker, NodeName: o.NodeName, Log: log}
	if pm != nil {
		cfg.OnProblem = func(nodeport.Problem) { pm.Rejected(model.ReasonNodePortNotAssigned) }
	}
	return pipeline.New(cfg)
}

// newPipelineWith is run's and run --once's pipeline: newPipeline with run's loader (last good
// copies in --state-dir), the Node object's absence reported in sm (may be nil).
func newPipelineWith(o *Options, log logr.Logger, a *nodeport.Assigner, tracker *model.Tracker, pm *metrics.Proxy, sm *metrics.Source) *pipeline.Pipeline {
	cfg := pipeline.Config{Dir: o.Manifests, Loader: o.runLoader(log, sm), Assigner: a, Tracker: tracker, NodeName: o.NodeName, Log: log}
	if pm != nil {
		cfg.OnProblem = func(nodeport.Problem) { pm.Rejected(model.ReasonNodePortNotAssigned) }
	}
	if sm != nil {
		cfg.OnNodeMissing = sm.NodeMissing
	}
	return pipeline.New(cfg)
}
