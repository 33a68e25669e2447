// Package controller is nftproxy's cluster controller for node-port blocks: it gives each
// port-range Service of type NodePort or LoadBalancer an identity-mapped block (node ports =
// the Service's own range) from a cluster-wide range, records it in the annotation
// nftproxy.io/node-port-ranges, and keeps two Services from ever holding overlapping blocks.
//
// One replica at a time acts, elected through a coordination.k8s.io Lease; the others wait.
// A new leader rebuilds the allocation from the annotations of all Services before it gives
// out anything new, so the cluster, not the process, holds the state (README.md).
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/nftproxy/nftproxy/allocator"
)

// Defaults for Config's zero values.
const (
	DefaultLeaseName     = "nftproxy-allocator"
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	DefaultResyncPeriod  = 10 * time.Minute
	// WatchdogTolerance is how long past its Lease's expiry a replica that still believes it
	// leads is reported not alive (Alive): it has stopped renewing without stepping down, which
	// only a stuck process does (kube-controller-manager's tolerance).
	WatchdogTolerance = 20 * time.Second
	// FieldManager names the controller in the Services' managedFields and is the Events'
	// reporting controller.
	FieldManager = "nftproxy-allocator"
)

// Config configures a Controller.
type Config struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// BlockRange is where node-port blocks live (--range-node-port-range). Required; check it
	// with CheckRanges first.
	BlockRange allocator.Range
	// ProxyName selects Services as the proxies do: empty handles Services without the
	// service.kubernetes.io/service-proxy-name label, a name only Services labelled with it.
	ProxyName string
	// Identity names this replica in the Lease; it must be unique among the replicas. Required.
	Identity string
	// LeaseNamespace and LeaseName locate the Lease (LeaseName default DefaultLeaseName).
	LeaseNamespace string
	LeaseName      string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader-election timings
	// (defaults 15s, 10s, 2s). A replica that stops renewing acts for at most RenewDeadline;
	// a waiting one takes over LeaseDuration after the last renewal it saw.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// ResyncPeriod is how often every Service is looked at again (default ten minutes).
	ResyncPeriod time.Duration
	// Events records Events on Services; nil builds an events.k8s.io recorder on Client.
	Events events.EventRecorder
	// Observer receives each leader's allocator numbers (normally metrics.AllocatorMetrics).
	// Each term starts a new allocator, so the blocks claimed back at a takeover count as
	// static allocations again.
	Observer allocator.Observer
	Logger   logr.Logger
}

// Controller assigns node-port blocks while it is the elected leader.
type Controller struct {
	cfg    Config
	leader atomic.Bool
	// observed is the holder of the Lease as last seen (nil: the Lease was never read).
	observed atomic.Pointer[string]
	// watchdog checks the current elector: a leader past its Lease is stuck.
	watchdog *leaderelection.HealthzAdaptor
	// mu guards cur, the running leader session (nil while not leading).
	mu  sync.Mutex
	cur *session
}

// New checks cfg and fills in defaults.
func New(cfg Config) (*Controller, error) {
	if cfg.Client == nil {
		return nil, errors.New("allocator controller: no API client configured")
	}
	if err := cfg.BlockRange.Validate(); err != nil {
		return nil, fmt.Errorf("allocator controller: block range: %w", err)
	}
	if cfg.Identity == "" {
		return nil, errors.New("allocator controller: empty identity; each replica needs a unique one (the pod name)")
	}
	if cfg.LeaseNamespace == "" {
		return nil, errors.New("allocator controller: no Lease namespace; pass the pod's namespace")
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&cfg.LeaseDuration, DefaultLeaseDuration)
	def(&cfg.RenewDeadline, DefaultRenewDeadline)
	def(&cfg.RetryPeriod, DefaultRetryPeriod)
	def(&cfg.ResyncPeriod, DefaultResyncPeriod)
	if cfg.RenewDeadline >= cfg.LeaseDuration {
		return nil, fmt.Errorf("allocator controller: renew deadline %s must be shorter than the lease duration %s, "+
			"or a stalled leader could still act when another takes over", cfg.RenewDeadline, cfg.LeaseDuration)
	}
	return &Controller{cfg: cfg, watchdog: leaderelection.NewLeaderHealthzAdaptor(WatchdogTolerance)}, nil
}

// IsLeader reports whether this replica leads now.
func (c *Controller) IsLeader() bool { return c.leader.Load() }

// Leader returns the Lease's holder as this replica last saw it, and false until it has read
// the Lease once (it has not reached the API server yet). Readiness follows it: a replica that
// knows the leader takes part in the election. An API server lost later does not clear it.
func (c *Controller) Leader() (string, bool) {
	p := c.observed.Load()
	if p == nil {
		return "", false
	}
	return *p, true
}

// Alive returns an error when this replica believes it leads while its Lease expired more
// than WatchdogTolerance ago: its renew loop is stuck, and only a restart frees the Lease
// promptly. A replica that lost the Lease (the API server unreachable) steps down and stays
// alive: a control-plane outage must not become a restart loop.
func (c *Controller) Alive() error { return c.watchdog.Check(nil) }

// Snapshot returns the current leader's allocation and true, or false while not leading. It is
// meant for status output and tests.
func (c *Controller) Snapshot() (allocator.Snapshot, bool) {
	c.mu.Lock()
	s := c.cur
	c.mu.Unlock()
	if s == nil {
		return allocator.Snapshot{}, false
	}
	return s.alloc.Snapshot(), true
}

// Run campaigns for the Lease until ctx ends; while it holds the Lease it leads (rebuild,
// then assign). After losing the Lease it stops acting, waits for its session to end, and
// campaigns again with a fresh state. The Lease is not released when ctx ends: a successor
// waits out LeaseDuration, so a session still finishing a write can never overlap with it.
func (c *Controller) Run(ctx context.Context) error {
	rec, stop := c.cfg.Events, func() {}
	if rec == nil {
		b := events.NewBroadcaster(&events.EventSinkImpl{Interface: c.cfg.Client.EventsV1()})
		b.StartRecordingToSink(ctx.Done())
		s := runtime.NewScheme()
		_ = corev1.AddToScheme(s)
		rec, stop = b.NewRecorder(s, FieldManager), b.Shutdown
	}
	defer stop()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.cfg.LeaseNamespace, Name: c.cfg.LeaseName},
		Client:     c.cfg.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.cfg.Identity},
	}
	log := c.cfg.Logger.WithValues("identity", c.cfg.Identity, "lease", c.cfg.LeaseNamespace+"/"+c.cfg.LeaseName)
	for ctx.Err() == nil {
		var r round
		// A session that fails stops renewing, so another replica can take over.
		rctx, rcancel := context.WithCancel(ctx)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          lock,
			LeaseDuration: c.cfg.LeaseDuration,
			RenewDeadline: c.cfg.RenewDeadline,
			RetryPeriod:   c.cfg.RetryPeriod,
			Name:          c.cfg.LeaseName,
			WatchDog:      c.watchdog,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					if !r.enter() {
						return // the election round already ended
					}
					defer r.wg.Done()
					log.Info("Leading: rebuilding node-port blocks from the Services' annotations")
					if err := c.lead(lctx, rec, log); err != nil && lctx.Err() == nil {
						log.Error(err, "Leader session failed; no longer renewing the Lease, so another replica can take over")
						rcancel()
					}
				},
				OnStoppedLeading: func() { log.Info("Not leading") },
				OnNewLeader: func(id string) {
					c.observed.Store(&id)
					if id != c.cfg.Identity {
						log.Info("Another replica leads", "leader", id)
					}
				},
			},
		})
		if err != nil {
			rcancel()
			return fmt.Errorf("leader election on Lease %s/%s: %w", c.cfg.LeaseNamespace, c.cfg.LeaseName, err)
		}
		le.Run(rctx)
		// le.Run returns as soon as the lease is lost; the session may still be finishing.
		r.close()
		rcancel()
	}
	return nil
}

// round tracks the session of one election round, so Run can wait for it: the leader
// elector starts the session in its own goroutine and does not wait for it.
type round struct {
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// enter registers the session; false once the round has ended (never start late).
func (r *round) enter() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.wg.Add(1)
	return true
}

// close ends the round and waits for a session that entered it.
func (r *round) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wg.Wait()
}

// lead runs one leader session until ctx ends: a fresh informer (its first list is a
// consistent read made after the Lease was won), the rebuild from annotations, then the
// worker. It returns only when ctx ends, or on a setup error.
func (c *Controller) lead(ctx context.Context, rec events.EventRecorder, log logr.Logger) error {
	s, err := newSession(c.cfg, rec, log)
	if err != nil {
		return err
	}
	c.leader.Store(true)
	defer c.leader.Store(false)
	c.mu.Lock()
	c.cur = s
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.cur = nil
		c.mu.Unlock()
	}()
	return s.run(ctx)
}
