// Package nodeport makes manifest mode its own control plane for node ports: before loaded
// Services reach the model, it fills in what the API server (and nftproxy's cluster allocator)
// would have: spec.ports[].nodePort, spec.healthCheckNodePort and the node-port blocks of
// port-range Services (annotation nftproxy.io/node-port-ranges). Assignments are kept in a JSON
// file under a state directory, so a Service keeps its ports across restarts.
//
// The rules are the API server's and the cluster controller's, and live in allocator/policy,
// which both this package and allocator/controller call: which Services get node ports and
// blocks, when a held one is kept (KEP-1864), identity blocks, the default ranges and the
// wording of refusals. This package applies them to manifest Services in phases (round.go):
// explicit ports are reserved (static), missing ones are allocated from the dynamic band
// (KEP-3668), a LoadBalancer Service with externalTrafficPolicy: Local gets a health-check node
// port, and a port-range Service gets its identity block from a range that never overlaps the
// node-port range.
package nodeport

import (
	"bytes"
	"fmt"
	"sync"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/manifest"
)

// Config says where node ports and blocks come from and where assignments are kept.
type Config struct {
	// NodePortRange is the range of ordinary node ports and health-check node ports.
	NodePortRange allocator.Range
	// BlockRange holds the node-port blocks of range Services. The zero Range disables blocks:
	// range Services then get none, and each is reported. It must not overlap NodePortRange.
	BlockRange allocator.Range
	// StateDir is where assignments are persisted; empty keeps them in memory only.
	StateDir string
	// ReadOnly loads the assignments from StateDir but never writes them: `render` prints what
	// `run` applies with the same state directory, and must not move the daemon's ports.
	ReadOnly bool
	// Observer receives the node-port range's numbers (normally metrics.AllocatorMetrics):
	// counts after each assignment, and one event per port newly allocated or refused.
	Observer allocator.Observer
	// Rand picks where dynamic scans start; nil seeds a generator per assignment.
	Rand allocator.Rand
}

// hasBlocks: a block range is configured.
func (c Config) hasBlocks() bool { return c.BlockRange != (allocator.Range{}) }

// Problem is one node port or block a Service did not get. The Service is still fed to the
// model, without that port (its spec.ports[].nodePort is cleared, its annotation entry
// removed), so everything else about it keeps working; Err says why and what to do.
type Problem struct {
	// Service is "namespace/name".
	Service string
	// Port names the ServicePort; "healthCheckNodePort" for the health-check node port.
	Port string
	Err  error
}

// Error returns e.g. `Service voip/rtp port "rtp": node-port block ...`.
func (p Problem) Error() string {
	return fmt.Sprintf("Service %s port %q: %v", p.Service, p.Port, p.Err)
}

// Unwrap returns the underlying error (allocator errors keep their sentinels for errors.Is).
func (p Problem) Unwrap() error { return p.Err }

// Assigner assigns node ports and blocks to manifest Services. It is safe for concurrent use,
// though the manifest watcher calls it from one goroutine.
type Assigner struct {
	cfg Config
	log logr.Logger

	mu      sync.Mutex
	held    map[string]svcEntry // last assignment, by "namespace/name"
	gave    map[string]written  // what the last Assign gave the model (see round.write)
	written []byte              // last state written (nil: nothing written yet)
}

// New checks cfg and loads the persisted assignments from cfg.StateDir. A state file that
// cannot be read is an error (starting empty would move every dynamically assigned port).
func New(cfg Config, log logr.Logger) (*Assigner, error) {
	if err := cfg.NodePortRange.Validate(); err != nil {
		return nil, fmt.Errorf("node-port range: %w", err)
	}
	if cfg.hasBlocks() {
		if err := cfg.BlockRange.Validate(); err != nil {
			return nil, fmt.Errorf("node-port block range: %w", err)
		}
		if err := policy.CheckDisjoint(cfg.BlockRange, cfg.NodePortRange); err != nil {
			return nil, err
		}
	}
	held, err := loadState(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	a := &Assigner{cfg: cfg, log: log, held: held}
	if cfg.StateDir != "" {
		if b, err := encodeState(a.stateLocked()); err == nil {
			a.written = b // what is on disk already, if the file existed unchanged
		}
	}
	return a, nil
}

// Assign fills in node ports, health-check node ports and node-port blocks on the Services of
// objs, in place, so the caller passes objs on to manifest.Feeder.Feed unchanged. errs are the
// load's file errors: Services from a file that failed to load are absent from objs but kept by
// the feeder, so their assignments are kept too. It returns the ports and blocks that could not
// be given (each also leaves the Service without that port) and an error if the state could
// not be persisted (the assignment still applies; the write is retried on the next call).
func (a *Assigner) Assign(objs *manifest.Objects, errs []manifest.FileError) ([]Problem, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	failed := map[string]bool{}
	for _, e := range errs {
		failed[e.File] = true
	}
	r := newRound(a.cfg, a.gave)
	plans := make([]*plan, len(objs.Services))
	for i, svc := range objs.Services {
		key := svc.Namespace + "/" + svc.Name
		plans[i] = r.addLive(svc, objs.From[manifest.Ref{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name}], key, a.held[key])
	}
	for key, e := range a.held {
		if _, live := r.live[key]; !live && failed[e.File] {
			r.addKept(key, e)
		}
	}
	r.run()
	for i, p := range plans {
		objs.Services[i] = p.svc
	}
	a.observe(r)
	a.held, a.gave = r.result(), r.nextWritten
	for _, p := range r.problems {
		a.log.V(1).Info("Node port not assigned", "service", p.Service, "port", p.Port, "reason", p.Err.Error())
	}
	return r.problems, a.persistLocked()
}

// observe reports the node-port range's numbers to the Observer: the counts after this round,
// and one event per port that was newly allocated or refused (ports kept from before are not
// counted again).
func (a *Assigner) observe(r *round) {
	o := a.cfg.Observer
	if o == nil {
		return
	}
	for _, s := range r.events {
		if s.ok {
			o.Allocated(s.scope)
		} else {
			o.AllocationFailed(s.scope)
		}
	}
	o.Counts(r.nodePorts.Used(), r.nodePorts.Free())
}

func (a *Assigner) stateLocked() state {
	s := state{Version: stateVersion, NodePortRange: a.cfg.NodePortRange, Services: a.held}
	if a.cfg.hasBlocks() {
		br := a.cfg.BlockRange
		s.BlockRange = &br
	}
	return s
}

func (a *Assigner) persistLocked() error {
	if a.cfg.StateDir == "" || a.cfg.ReadOnly {
		return nil
	}
	b, err := encodeState(a.stateLocked())
	if err != nil {
		return err
	}
	if bytes.Equal(b, a.written) {
		return nil
	}
	if err := writeFileAtomic(a.cfg.StateDir, StateFile, b); err != nil {
		return fmt.Errorf("persist node-port assignments (they apply now but would not survive a restart): %w", err)
	}
	a.written = b
	return nil
}

// Held returns a copy of the current assignment of one Service ("namespace/name"): node port by
// ServicePort name, the health-check node port, and blocks by ServicePort name. ok is false if
// the Service holds nothing. It is meant for status output and tests.
func (a *Assigner) Held(key string) (ports map[string]int, healthCheck int, blocks map[string]allocator.Range, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.held[key]
	if !ok {
		return nil, 0, nil, false
	}
	ports = map[string]int{}
	for _, p := range e.Ports {
		ports[p.Name] = p.NodePort
	}
	blocks = map[string]allocator.Range{}
	for _, b := range e.Blocks {
		blocks[b.Name] = b.Block
	}
	return ports, e.HealthCheckNodePort, blocks, true
}
