package app

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/proxy/explain"
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
	// FailingSince is when the source stopped answering (zero while it answers): an API server
	// that does not answer, a manifest directory that is missing or unreadable. The rules
	// programmed last stay meanwhile; it is reported by /healthz's body and nftproxy_source_up,
	// never a failed probe.
	FailingSince() time.Time
	fmt.Stringer
}

// newSource picks where the model comes from: manifest files when --manifests is given, else
// the API server (--kubeconfig, --master, or the pod's in-cluster ServiceAccount). obs receives
// the node-port allocator's numbers (manifest mode; in a cluster the API server allocates); pm
// counts manifest mode's node ports not assigned. Each may be nil.
func newSource(o *Options, log logr.Logger, obs allocator.Observer, sm *metrics.Source, pm *metrics.Proxy) (source, error) {
	if o.Manifests != "" && (o.Kubeconfig != "" || o.Master != "") {
		return nil, errors.New("--manifests and --kubeconfig/--master both given: choose manifest files or an API server")
	}
	if o.kubeMode() {
		return newKubeSource(o, log)
	}
	if o.Manifests == "" {
		return nil, errors.New("no source: pass --manifests (a directory of Service, EndpointSlice and Node manifests) or --kubeconfig (an API server); in a pod the in-cluster config is used")
	}
	// The assigner is built here, so a bad range flag or state file fails at start-up; the
	// pipeline around it needs the Tracker Run is given.
	a, err := newAssigner(o, log, obs)
	if err != nil {
		return nil, err
	}
	if o.StateDir == "" {
		log.Info("node ports assigned in manifest mode are kept in memory only, and no last good copy of the manifest files is kept: set --state-dir to keep both across restarts. Without it, a file that cannot be read or decoded at start serves none of its objects (the rules of the run before for them are removed) until it is fixed")
	}
	m := &manifestSource{o: o, log: log, assigner: a, pm: pm, sm: sm}
	m.watcher = manifest.Watcher{Dir: o.Manifests, Loader: o.runLoader(log, sm), Log: log.WithName("manifests"),
		OnFailure: func(err error) {
			if sm != nil {
				sm.Failing(manifestSourceLabel, err)
			}
		}}
	return m, nil
}

// lastGoodDir is where run keeps the last good copy of each manifest file: a directory of the
// state directory, beside the node-port assignments.
const lastGoodDir = "last-good-manifests"

// runLoader is run's (and run --once's) loader: with --state-dir, it keeps a last good copy of
// each manifest file there, and a file that cannot be used at start is replaced by its copy
// (counted in sm, which may be nil). render does not write the state directory, so it reads
// with o.loader().
func (o *Options) runLoader(log logr.Logger, sm *metrics.Source) manifest.Loader {
	l := o.loader()
	if o.StateDir != "" {
		l.LastGoodDir = filepath.Join(o.StateDir, lastGoodDir)
	}
	l.Log = log.WithName("manifests")
	if sm != nil {
		l.OnLastGood = func(string) { sm.LastGoodLoaded(manifestSourceLabel) }
	}
	return l
}

// The sources' values of the metrics' source label.
const (
	manifestSourceLabel  = "manifests"
	apiServerSourceLabel = "apiserver"
)

// manifestSource watches a directory of manifests (the embedded default, no cluster needed),
// acting as its own control plane for node ports.
type manifestSource struct {
	o        *Options
	log      logr.Logger
	assigner *nodeport.Assigner
	pm       *metrics.Proxy
	sm       *metrics.Source // may be nil
	loaded   atomic.Bool
	watcher  manifest.Watcher
	// status, when set, receives the node ports each load could not assign (for explain).
	status *explain.Status
}

func (m *manifestSource) String() string { return "manifests " + m.watcher.Dir }

// Ready is true once the directory has been read: a directory missing at start-up leaves the
// kernel as it is (the rules of an earlier run keep serving) until it appears.
func (m *manifestSource) Ready() bool { return m.loaded.Load() }

// FailingSince is when the manifest directory became missing or unreadable, or a file of it
// could not be used, zero while every file loads (a bad file keeps its last good objects).
func (m *manifestSource) FailingSince() time.Time { return m.watcher.FailingSince() }

func (m *manifestSource) Run(ctx context.Context, tracker *model.Tracker, notify func()) error {
	pl := newPipelineWith(m.o, m.log, m.assigner, tracker, m.pm, m.sm)
	m.watcher.OnLoad = func(objs manifest.Objects, ferrs []manifest.FileError) {
		if m.sm != nil && manifest.DirectoryError(ferrs) == nil {
			m.sm.BadFiles(manifestSourceLabel, len(manifest.BadFiles(ferrs)))
		}
		res := pl.Apply(objs, ferrs)
		if m.status != nil && manifest.DirectoryError(ferrs) == nil {
			m.status.SetNodePortProblems(res.Problems)
		}
		m.loaded.Store(true)
		notify()
	}
	return m.watcher.Run(ctx)
}
