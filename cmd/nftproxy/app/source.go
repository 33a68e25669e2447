package app

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
)

// source feeds Services, EndpointSlices and the Node into the tracker and pokes the sync loop.
type source interface {
	// Run feeds tracker until ctx ends, calling notify after each change.
	Run(ctx context.Context, tracker *model.Tracker, notify func()) error
	// Ready reports whether the initial state has been delivered (for /healthz).
	Ready() bool
	// FailingSince is when the source stopped answering (zero while it answers): reported by
	// /healthz's body and nftproxy_source_up, never a failed probe. Files never fail.
	FailingSince() time.Time
	fmt.Stringer
}

// newSource picks where the model comes from: manifest files when --manifests is given, else
// the API server (--kubeconfig, --master, or the pod's in-cluster ServiceAccount). obs receives
// the node-port allocator's numbers (manifest mode; in a cluster the API server allocates).
func newSource(o *Options, log logr.Logger, obs allocator.Observer) (source, error) {
	if o.Manifests != "" && (o.Kubeconfig != "" || o.Master != "") {
		return nil, errors.New("--manifests and --kubeconfig/--master both given: choose manifest files or an API server")
	}
	if o.kubeMode() {
		return newKubeSource(o, log)
	}
	if o.Manifests == "" {
		return nil, errors.New("no source: pass --manifests (a directory of Service, EndpointSlice and Node manifests) or --kubeconfig (an API server); in a pod the in-cluster config is used")
	}
	a, err := newAssigner(o, log, obs)
	if err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		log.Info("node ports assigned in manifest mode are kept in memory only: set --state-dir to keep them across restarts")
	}
	return &manifestSource{dir: o.Manifests, node: o.NodeName, log: log, assigner: a}, nil
}

// manifestSource watches a directory of manifests (the embedded default, no cluster needed),
// acting as its own control plane for node ports.
type manifestSource struct {
	dir, node string
	log       logr.Logger
	assigner  *nodeport.Assigner
	loaded    atomic.Bool
}

func (m *manifestSource) String() string { return "manifests " + m.dir }
func (m *manifestSource) Ready() bool    { return m.loaded.Load() }

// FailingSince is always zero: a directory does not go away like an API server (a broken file
// is reported and skipped on its own).
func (m *manifestSource) FailingSince() time.Time { return time.Time{} }

func (m *manifestSource) Run(ctx context.Context, tracker *model.Tracker, notify func()) error {
	feeder := manifest.NewFeeder(tracker)
	return manifest.Watch(ctx, m.dir, m.log.WithName("manifests"), func(objs manifest.Objects, ferrs []manifest.FileError) {
		reportFileErrors(m.log, ferrs)
		assign(m.assigner, m.log, &objs, ferrs)
		feeder.Feed(objs, ferrs)
		if !m.loaded.Swap(true) {
			warnNoNode(m.log, tracker, m.node)
		}
		notify()
	})
}
