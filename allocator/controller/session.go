package controller

import (
	"context"
	"fmt"
	"sort"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// session is one leadership term: its own informer, allocator and bookkeeping, all built from
// the cluster when it starts and dropped when it ends. Only the worker goroutine touches the
// allocator and the maps after run has started.
type session struct {
	cfg     Config
	rec     events.EventRecorder
	log     logr.Logger
	factory informers.SharedInformerFactory
	lister  corelisters.ServiceLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	alloc   *allocator.Allocator

	// held is what each Service ("namespace/name") holds, as the controller has recorded it.
	held map[string]*holding
	// waiting are Services refused a block that another Service holds; they are looked at again
	// whenever a block is released.
	waiting map[string]bool
	// reported are the Events already sent per Service, so each problem is reported once.
	reported map[string]reported
}

// holding is one Service's blocks. Two ranged ports with the same range share one block.
type holding struct {
	uid     types.UID
	created metav1.Time
	blocks  map[string]allocator.Range // by ServicePort name
}

type reported struct {
	uid  types.UID
	sent map[string]bool // reason + message
}

// proxySelector selects the Services the proxies handle, as proxy/k8s does: without a name,
// those lacking the service-proxy-name label; with a name, those labelled with it.
func proxySelector(name string) (labels.Selector, error) {
	op, vals := selection.DoesNotExist, []string(nil)
	if name != "" {
		op, vals = selection.Equals, []string{name}
	}
	req, err := labels.NewRequirement(annotation.ServiceProxyNameLabel, op, vals)
	if err != nil {
		return nil, fmt.Errorf("service proxy name %q: %w", name, err)
	}
	return labels.NewSelector().Add(*req), nil
}

func newSession(cfg Config, rec events.EventRecorder, log logr.Logger) (*session, error) {
	sel, err := proxySelector(cfg.ProxyName)
	if err != nil {
		return nil, err
	}
	var opts []allocator.Option
	if cfg.Observer != nil {
		opts = append(opts, allocator.WithObserver(cfg.Observer))
	}
	alloc, err := allocator.New(cfg.BlockRange, opts...)
	if err != nil {
		return nil, fmt.Errorf("block range: %w", err)
	}
	f := informers.NewSharedInformerFactoryWithOptions(cfg.Client, cfg.ResyncPeriod,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }))
	inf := f.Core().V1().Services()
	s := &session{
		cfg: cfg, rec: rec, log: log, factory: f, lister: inf.Lister(), synced: inf.Informer().HasSynced,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: FieldManager}),
		alloc: alloc, held: map[string]*holding{}, waiting: map[string]bool{}, reported: map[string]reported{},
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(key)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("Service informer: %w", err)
	}
	return s, nil
}

// run lists, rebuilds, assigns, then follows changes until ctx ends.
func (s *session) run(ctx context.Context) error {
	defer s.factory.Shutdown()
	defer s.queue.ShutDown()
	s.factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.synced) {
		return fmt.Errorf("list Services: %w", ctx.Err())
	}
	svcs, err := s.lister.List(labels.Everything())
	if err != nil {
		return fmt.Errorf("list Services from the cache: %w", err)
	}
	sortOldestFirst(svcs)
	s.rebuild(svcs)
	s.log.Info("Rebuilt node-port blocks from annotations", "services", len(svcs), "blocks", len(s.alloc.Blocks()),
		"ports", s.alloc.Used(), "free", s.alloc.Free())
	// Oldest first, so of two new Services wanting the same block the older gets it.
	for _, svc := range svcs {
		key := svc.Namespace + "/" + svc.Name
		if err := s.process(ctx, key); err != nil {
			s.retry(key, err)
		}
	}
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	for s.next(ctx) {
	}
	return nil
}

func (s *session) next(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if err := s.process(ctx, key); err != nil {
		s.retry(key, err)
		return true
	}
	s.queue.Forget(key)
	return true
}

func (s *session) retry(key string, err error) {
	s.log.V(1).Info("Retrying Service", "service", key, "error", err.Error())
	s.queue.AddRateLimited(key)
}

// sortOldestFirst orders by creationTimestamp, then namespace/name: the order in which
// Services win contested blocks.
func sortOldestFirst(svcs []*corev1.Service) {
	sort.SliceStable(svcs, func(i, j int) bool {
		return older(svcs[i].CreationTimestamp, keyOf(svcs[i]), svcs[j].CreationTimestamp, keyOf(svcs[j]))
	})
}

func keyOf(svc *corev1.Service) string { return svc.Namespace + "/" + svc.Name }

// older reports whether a (created ca, key ka) comes before b.
func older(ca metav1.Time, ka string, cb metav1.Time, kb string) bool {
	if !ca.Equal(&cb) {
		return ca.Before(&cb)
	}
	return ka < kb
}

// rebuild claims, oldest Service first, every block recorded in an annotation that the
// Service may hold: an entry equal to its own range (identity), on a Service that has node
// ports. A Service whose port-ranges annotation the proxies reject keeps its parsed entries as
// written, so a typo does not give its block away. Recorded blocks that collide with an older
// Service's are not claimed; processing that Service then reports and removes them.
func (s *session) rebuild(svcs []*corev1.Service) {
	for _, svc := range svcs {
		w := analyze(svc)
		if !w.eligible || !w.recordedOK || len(w.recorded) == 0 {
			continue
		}
		key := keyOf(svc)
		h := &holding{uid: svc.UID, created: svc.CreationTimestamp, blocks: map[string]allocator.Range{}}
		if w.rangesOK {
			for _, r := range w.ranges {
				if rec, ok := w.recorded[r.Name]; ok && policy.Block(rec) == policy.Block(r) {
					s.claimOwn(key, h, r.Name, policy.Block(r))
				}
			}
		} else {
			names := make([]string, 0, len(w.recorded))
			for n := range w.recorded {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				s.claimOwn(key, h, n, policy.Block(w.recorded[n]))
			}
		}
		if len(h.blocks) > 0 {
			s.held[key] = h
		}
	}
}

// claimOwn claims b for port name of the Service key into h, sharing a block another port of
// the same Service already holds.
func (s *session) claimOwn(key string, h *holding, name string, b allocator.Range) error {
	for _, hb := range h.blocks {
		if hb == b {
			h.blocks[name] = b
			return nil
		}
	}
	if _, err := s.alloc.AllocateBlockAt(b.First, b.Size(), policy.BlockOwner(key, name)); err != nil {
		return err
	}
	h.blocks[name] = b
	return nil
}

// release frees the blocks of h that no port in keep uses, and wakes the waiting Services if
// any was freed.
func (s *session) release(key string, h *holding, keep map[string]allocator.Range) {
	freed := false
	done := map[allocator.Range]bool{}
	for _, b := range keep {
		done[b] = true
	}
	for _, b := range h.blocks {
		if done[b] {
			continue
		}
		done[b] = true
		if err := s.alloc.ReleaseBlock(b); err != nil {
			s.log.Error(err, "Releasing a node-port block the controller believed held", "service", key, "block", b.String())
			continue
		}
		freed = true
		s.log.V(1).Info("Released node-port block", "service", key, "block", b.String())
	}
	if freed {
		s.wake()
	}
}

// releaseAll frees everything the Service key holds.
func (s *session) releaseAll(key string) {
	if h := s.held[key]; h != nil {
		s.release(key, h, nil)
		delete(s.held, key)
	}
	delete(s.waiting, key)
}

// wake puts every Service waiting for a block back in the queue.
func (s *session) wake() {
	for k := range s.waiting {
		s.queue.Add(k)
	}
	clear(s.waiting)
}
