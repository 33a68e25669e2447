// Package k8s is the Kubernetes source of the service model: client-go informers for Services,
// EndpointSlices and this node's Node feed the model's Tracker, and Services the Tracker rejects
// are reported as Kubernetes Events on the Service.
package k8s

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// HeadlessLabel marks the EndpointSlices of headless Services (set by the EndpointSlice
// controller); a proxy never programs them, so they are not even listed.
const HeadlessLabel = "service.kubernetes.io/headless"

// Config configures a Source.
type Config struct {
	// Client talks to the API server. Required.
	Client kubernetes.Interface
	// NodeName is this node's Node name (the DaemonSet passes spec.nodeName). Required: only
	// this Node is watched, and it selects node-local endpoints.
	NodeName string
	// ProxyName is the service-proxy-name this proxy answers to: empty handles Services without
	// the service.kubernetes.io/service-proxy-name label, a name handles only Services labelled
	// with it. Applied by the API server (a label selector), like kube-proxy.
	ProxyName string
	Logger    logr.Logger
	// Events records Events on rejected Services. Nil: Run builds an events.k8s.io/v1
	// recorder on Client and stops it when Run returns.
	Events events.EventRecorder
	// ScanPeriod is the least time between two looks for new or changed rejections (each look
	// reads the whole model once); default one second.
	ScanPeriod time.Duration
	// EventInterval is the least time between two Events about one Service; a rejection that
	// changes faster is reported when the interval has passed, with its latest reason. Default
	// one minute.
	EventInterval time.Duration
	// Now is the clock for event rate limiting; time.Now if nil.
	Now func() time.Time
	// ProbePeriod is how often the API server's /readyz is asked (FailingSince); default
	// DefaultProbePeriod.
	ProbePeriod time.Duration
}

// Source feeds the Tracker from the API server. It implements the daemon's model source: Run
// until the context ends, Ready once every informer has delivered its initial list.
type Source struct {
	cfg      Config
	selector labels.Selector
	ready    atomic.Bool
	running  atomic.Bool
	// services is the Service informer's store (for Events' object references) once Run started.
	services atomic.Pointer[cache.Indexer]
	// scan is poked (never blocks) after each change, for the rejection scanner.
	scan  chan struct{}
	reach reachability
	drain draining
}

// New checks cfg and returns a Source that has not started yet.
func New(cfg Config) (*Source, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubernetes source: no API client configured")
	}
	if cfg.NodeName == "" {
		return nil, errors.New("kubernetes source: the node name is empty; pass --hostname-override (the DaemonSet sets it from spec.nodeName)")
	}
	sel, err := ProxyNameSelector(cfg.ProxyName)
	if err != nil {
		return nil, err
	}
	if cfg.ScanPeriod <= 0 {
		cfg.ScanPeriod = time.Second
	}
	if cfg.EventInterval <= 0 {
		cfg.EventInterval = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ProbePeriod <= 0 {
		cfg.ProbePeriod = DefaultProbePeriod
	}
	return &Source{cfg: cfg, selector: sel, scan: make(chan struct{}, 1)}, nil
}

// ProxyNameSelector is the label selector the API server applies to Services and EndpointSlices:
// the service-proxy-name rule (model.HandlesService) and no headless slices. The EndpointSlice
// controller copies a Service's labels to its slices, so both lists shrink together; a slice
// managed by hand for a Service handled by a named proxy must carry the same label.
func ProxyNameSelector(proxyName string) (labels.Selector, error) {
	name, err := labels.NewRequirement(annotation.ServiceProxyNameLabel, selection.DoesNotExist, nil)
	if proxyName != "" {
		name, err = labels.NewRequirement(annotation.ServiceProxyNameLabel, selection.Equals, []string{proxyName})
	}
	if err != nil {
		return nil, fmt.Errorf("service proxy name %q is not a valid label value: %w", proxyName, err)
	}
	headless, err := labels.NewRequirement(HeadlessLabel, selection.DoesNotExist, nil)
	if err != nil {
		return nil, fmt.Errorf("headless selector: %w", err)
	}
	return labels.NewSelector().Add(*name, *headless), nil
}

// String names the source for logs.
func (s *Source) String() string {
	return fmt.Sprintf("kubernetes (node %s, services %q)", s.cfg.NodeName, s.selector.String())
}

// Ready reports whether the Services, EndpointSlices and the Node have been listed and handed
// to the Tracker; until then the daemon does not sync (a restart must not blank the ruleset).
func (s *Source) Ready() bool { return s.ready.Load() }

// NodeDraining says why this node should receive no new traffic ("" if it should): its Node is
// being deleted or tainted ToBeDeletedByClusterAutoscaler. The daemon's /healthz fails
// meanwhile, as kube-proxy's.
func (s *Source) NodeDraining() string { return s.drain.get() }

// FailingSince is when the API server stopped answering (zero while it answers): the daemon's
// /healthz fails once that lasts longer than its timeout, while the rules keep serving.
func (s *Source) FailingSince() time.Time { return s.reach.since() }

// Rescan asks the rejection scanner to look again soon; it never blocks. The informers poke it
// themselves; this is for rejections found elsewhere (a Service the kernel refused).
func (s *Source) Rescan() {
	select {
	case s.scan <- struct{}{}:
	default:
	}
}

// Run starts the informers, feeds tracker until ctx ends and calls notify after every change.
// It returns nil when ctx ends; it is not restartable.
func (s *Source) Run(ctx context.Context, tracker *model.Tracker, notify func()) error {
	if s.running.Swap(true) {
		return errors.New("kubernetes source: Run called twice")
	}
	log := s.cfg.Logger
	changed := func() {
		notify()
		s.Rescan()
	}
	infs, err := s.newInformers()
	if err != nil {
		return fmt.Errorf("kubernetes source: %w", err)
	}
	svcInf, sliceInf, nodeInf := infs.services, infs.slices, infs.node
	for what, inf := range map[string]cache.SharedIndexInformer{"services": svcInf, "endpointslices": sliceInf, "nodes": nodeInf} {
		if err := inf.SetWatchErrorHandler(watchErrorLogger(log, what)); err != nil {
			return fmt.Errorf("kubernetes source: %s informer: %w", what, err)
		}
	}
	idx := svcInf.GetIndexer()
	s.services.Store(&idx)

	regs := make([]cache.InformerSynced, 0, 3)
	for _, add := range []func() (cache.ResourceEventHandlerRegistration, error){
		func() (cache.ResourceEventHandlerRegistration, error) {
			return svcInf.AddEventHandler(serviceHandler(tracker, changed))
		},
		func() (cache.ResourceEventHandlerRegistration, error) {
			return sliceInf.AddEventHandler(sliceHandler(tracker, changed))
		},
		func() (cache.ResourceEventHandlerRegistration, error) {
			return nodeInf.AddEventHandler(nodeHandler(tracker, changed, func(n *corev1.Node, deleted bool) { s.drain.set(n, deleted, log) }))
		},
	} {
		reg, err := add()
		if err != nil {
			return fmt.Errorf("kubernetes source: add event handler: %w", err)
		}
		regs = append(regs, reg.HasSynced)
	}

	rec, stopEvents := s.recorder(ctx)
	defer stopEvents()
	var informersDone sync.WaitGroup
	defer informersDone.Wait()
	for _, inf := range []cache.SharedIndexInformer{svcInf, sliceInf, nodeInf} {
		informersDone.Go(func() { inf.RunWithContext(ctx) })
	}

	log.Info("Listing Services, EndpointSlices and this Node", "node", s.cfg.NodeName, "selector", s.selector.String())
	if !cache.WaitForCacheSync(ctx.Done(), regs...) {
		return nil // ctx ended first
	}
	s.ready.Store(true)
	log.Info("Informers synced: syncing rules",
		"services", len(svcInf.GetStore().ListKeys()), "endpointSlices", len(sliceInf.GetStore().ListKeys()),
		"nodeSeen", len(nodeInf.GetStore().ListKeys()) > 0)
	if len(nodeInf.GetStore().ListKeys()) == 0 {
		log.Info("No Node object with this name: node ports are not served until it appears; check --hostname-override", "node", s.cfg.NodeName)
	}
	changed()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		newReporter(rec, s.lookup, s.cfg.EventInterval, s.cfg.Now, log).loop(ctx, tracker, s.scan, s.cfg.ScanPeriod)
	}()
	go func() {
		defer wg.Done()
		s.reach.probe(ctx, s.cfg.Client, s.cfg.ProbePeriod, s.cfg.Now, log)
	}()
	<-ctx.Done()
	wg.Wait()
	return nil
}

// recorder returns the configured Event recorder or an events.k8s.io/v1 one, with its stop.
func (s *Source) recorder(ctx context.Context) (events.EventRecorder, func()) {
	if s.cfg.Events != nil {
		return s.cfg.Events, func() {}
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: s.cfg.Client.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	return b.NewRecorder(eventScheme(), "nftproxy"), b.Shutdown
}

// lookup returns the informer's copy of a Service, or nil.
func (s *Source) lookup(key model.ServiceKey) *corev1.Service {
	idx := s.services.Load()
	if idx == nil {
		return nil
	}
	obj, ok, err := (*idx).GetByKey(key.Namespace + "/" + key.Name)
	if err != nil || !ok {
		return nil
	}
	return serviceOf(obj)
}

// watchErrorLogger logs list/watch failures with what to do; the informer keeps retrying.
func watchErrorLogger(log logr.Logger, what string) cache.WatchErrorHandler {
	return func(_ *cache.Reflector, err error) {
		switch {
		case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
			log.Error(err, "Cannot list/watch: check the ServiceAccount's ClusterRole (list and watch on services, endpointslices and nodes); retrying", "resource", what)
		case errors.Is(err, context.Canceled):
		default:
			log.Info("Watch interrupted; the informer re-lists and continues", "resource", what, "err", err.Error())
		}
	}
}

// tombstone unwraps the final state of an object deleted while the watch was down.
func tombstone(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

func serviceHandler(tr *model.Tracker, changed func()) cache.ResourceEventHandler {
	upsert := func(obj any) {
		switch svc := obj.(type) {
		case *packedService:
			tr.UpsertPackedService(svc.packed)
			changed()
		case *corev1.Service:
			tr.UpsertService(svc)
			changed()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { upsert(obj) },
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			switch svc := tombstone(obj).(type) {
			case *packedService:
				tr.DeleteService(model.ServiceKey{Namespace: svc.namespace, Name: svc.name})
				changed()
			case *corev1.Service:
				tr.DeleteService(model.ServiceKey{Namespace: svc.Namespace, Name: svc.Name})
				changed()
			}
		},
	}
}

func sliceHandler(tr *model.Tracker, changed func()) cache.ResourceEventHandler {
	upsert := func(obj any) {
		switch s := obj.(type) {
		case *parsedSlice:
			tr.UpsertParsedEndpointSlice(s.parsed)
			changed()
		case *discoveryv1.EndpointSlice:
			tr.UpsertEndpointSlice(s)
			changed()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { upsert(obj) },
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			if s, err := meta.Accessor(tombstone(obj)); err == nil {
				tr.DeleteEndpointSlice(s.GetNamespace(), s.GetName())
				changed()
			}
		},
	}
}

// nodeHandler feeds this node's Node to the tracker, and to seen (deleted: the object is gone).
func nodeHandler(tr *model.Tracker, changed func(), seen func(n *corev1.Node, deleted bool)) cache.ResourceEventHandler {
	upsert := func(obj any) {
		if n, ok := obj.(*corev1.Node); ok {
			seen(n, false)
			tr.UpsertNode(n)
			changed()
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { upsert(obj) },
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			if n, ok := tombstone(obj).(*corev1.Node); ok {
				seen(n, true)
				tr.DeleteNode(n.Name)
				changed()
			}
		},
	}
}
