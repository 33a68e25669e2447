package app

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// source feeds Services, EndpointSlices and the Node into the tracker and pokes the sync loop.
type source interface {
	// Run feeds tracker until ctx ends, calling notify after each change.
	Run(ctx context.Context, tracker *model.Tracker, notify func()) error
	// Ready reports whether the initial state has been delivered (for /healthz).
	Ready() bool
	fmt.Stringer
}

// newSource picks where the model comes from.
func newSource(o *Options, log logr.Logger) (source, error) {
	if o.Manifests == "" {
		return nil, errors.New("--manifests is required: the directory of Service, EndpointSlice and Node manifests to serve")
	}
	return &manifestSource{dir: o.Manifests, node: o.NodeName, log: log}, nil
}

// manifestSource watches a directory of manifests (the embedded default, no cluster needed).
type manifestSource struct {
	dir, node string
	log       logr.Logger
	loaded    atomic.Bool
}

func (m *manifestSource) String() string { return "manifests " + m.dir }
func (m *manifestSource) Ready() bool    { return m.loaded.Load() }

func (m *manifestSource) Run(ctx context.Context, tracker *model.Tracker, notify func()) error {
	feeder := manifest.NewFeeder(tracker)
	return manifest.Watch(ctx, m.dir, m.log.WithName("manifests"), func(objs manifest.Objects, ferrs []manifest.FileError) {
		reportFileErrors(m.log, ferrs)
		feeder.Feed(objs, ferrs)
		if !m.loaded.Swap(true) {
			warnNoNode(m.log, tracker, m.node)
		}
		notify()
	})
}
