package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// The block range of every test: the default of the design, below the API server's range.
var testBlockRange = allocator.MustParseRange("1024-29999")

// t0 is the creation time of the oldest Service; svc(..., age) adds seconds to it.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// opt shapes a test Service.
type opt func(*corev1.Service)

// svc is a NodePort Service in namespace "voip" created `age` seconds after t0, with one UDP
// port per range "name=start-end" (port = start) and the port-ranges annotation naming them.
func svc(name string, age int, ranges string, opts ...opt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "voip", Name: name, UID: types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(age) * time.Second)), Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "198.19.0.10"},
	}
	if ranges != "" {
		rs, err := annotation.ParseRanges(ranges)
		if err != nil {
			panic(err)
		}
		for _, r := range rs {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: r.Name, Protocol: corev1.ProtocolUDP, Port: int32(r.Start)})
		}
		s.Annotations[annotation.PortRangesKey] = ranges
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func recordedAs(v string) opt {
	return func(s *corev1.Service) { s.Annotations[annotation.NodePortRangesKey] = v }
}

// allPorts marks the Service all-ports.
func allPorts(s *corev1.Service) { s.Annotations[annotation.AllPortsKey] = "true" }

func ofType(t corev1.ServiceType) opt { return func(s *corev1.Service) { s.Spec.Type = t } }

func loadBalancer(allocate *bool) opt {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.AllocateLoadBalancerNodePorts = allocate
	}
}

func labelled(proxy string) opt {
	return func(s *corev1.Service) {
		s.Labels = map[string]string{annotation.ServiceProxyNameLabel: proxy}
	}
}

func withPort(name string, port int32) opt {
	return func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: name, Protocol: corev1.ProtocolTCP, Port: port})
	}
}

var noAllocation = func() *bool { f := false; return &f }()

// sentEvent is one Event the recorder saw.
type sentEvent struct {
	regarding, related, reason, note string
}

// recorder keeps Events for assertions.
type recorder struct {
	mu     sync.Mutex
	events []sentEvent
}

func (r *recorder) Eventf(regarding, related runtime.Object, _, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := sentEvent{regarding: objKey(regarding), reason: reason, note: fmt.Sprintf(note, args...)}
	if related != nil {
		e.related = objKey(related)
	}
	r.events = append(r.events, e)
}

func objKey(o runtime.Object) string {
	m, ok := o.(metav1.Object)
	if !ok {
		return fmt.Sprintf("%T", o)
	}
	return m.GetNamespace() + "/" + m.GetName()
}

// summary lists Events as "regarding reason [related]", sorted.
func (r *recorder) summary() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.events {
		s := e.regarding + " " + e.reason
		if e.related != "" {
			s += " " + e.related
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func (r *recorder) reset() {
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
}

// harness drives one leader session step by step: the test changes Services through the fake
// API, waits until the session's cache shows the change, and processes the queue itself, so
// every step is deterministic.
type harness struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	rec    *recorder
	s      *session
}

// start runs a session's start-up (list, rebuild, the oldest-first pass) over objs, without
// its worker; drain plays the worker.
func start(t *testing.T, cfg Config, objs ...*corev1.Service) *harness {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var ros []runtime.Object
	for _, o := range objs {
		ros = append(ros, o)
	}
	h := &harness{t: t, ctx: ctx, client: fake.NewClientset(ros...), rec: &recorder{}}
	// The fake clientset drops writes made between the informer's List and its Watch (a known
	// race of its tracker), which would leave the cache behind for good. Register the watch on
	// the tracker ourselves and wait for it before anything writes.
	watching := make(chan struct{})
	var once sync.Once
	h.client.PrependWatchReactor("services", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := h.client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		once.Do(func() { close(watching) })
		return true, w, err
	})
	cfg.Client = h.client
	if cfg.BlockRange == (allocator.Range{}) {
		cfg.BlockRange = testBlockRange
	}
	s, err := newSession(cfg, h.rec, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	h.s = s
	t.Cleanup(func() { cancel(); s.queue.ShutDown(); s.factory.Shutdown() })
	s.factory.Start(ctx.Done())
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("the informer never started its Services watch")
	}
	h.waitSynced()
	svcs, err := s.lister.List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	sortOldestFirst(svcs)
	s.rebuild(svcs)
	for _, o := range svcs {
		if err := s.process(ctx, keyOf(o)); err != nil {
			t.Fatalf("process %s: %v", keyOf(o), err)
		}
	}
	h.drain()
	return h
}

// waitSynced waits (bounded) until the session's cache holds exactly what the fake API holds.
func (h *harness) waitSynced() {
	h.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(h.ctx, 5*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if !h.s.synced() {
			last = "informer not synced"
			return false, nil
		}
		api, err := h.client.CoreV1().Services("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		want := map[string]*corev1.Service{}
		for i := range api.Items {
			if sel, _ := proxySelector(h.s.cfg.ProxyName); sel.Matches(labels.Set(api.Items[i].Labels)) {
				want[keyOf(&api.Items[i])] = &api.Items[i]
			}
		}
		cached, err := h.s.lister.List(labels.Everything())
		if err != nil {
			return false, err
		}
		if len(cached) != len(want) {
			last = fmt.Sprintf("cache has %d Services, the API %d", len(cached), len(want))
			return false, nil
		}
		for _, c := range cached {
			if w, ok := want[keyOf(c)]; !ok || !equality.Semantic.DeepEqual(w, c) {
				last = "cache differs on " + keyOf(c)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		h.t.Fatalf("cache did not catch up with the API: %s (%v)", last, err)
	}
}

// drain processes the queue until it is empty, as the worker would, waiting for the cache
// after each write so the next step sees it.
func (h *harness) drain() {
	h.t.Helper()
	for i := 0; h.s.queue.Len() > 0; i++ {
		if i > 1000 {
			h.t.Fatal("the queue does not drain: a Service is processed again and again")
		}
		h.waitSynced()
		key, _ := h.s.queue.Get()
		if err := h.s.process(h.ctx, key); err != nil {
			h.t.Fatalf("process %s: %v", key, err)
		}
		h.s.queue.Forget(key)
		h.s.queue.Done(key)
	}
	h.waitSynced()
}

// apply creates or replaces a Service through the API, then lets the session react.
func (h *harness) apply(s *corev1.Service) {
	h.t.Helper()
	svcs := h.client.CoreV1().Services(s.Namespace)
	if _, err := svcs.Get(h.ctx, s.Name, metav1.GetOptions{}); err == nil {
		_, err = svcs.Update(h.ctx, s, metav1.UpdateOptions{})
		if err != nil {
			h.t.Fatal(err)
		}
	} else if _, err := svcs.Create(h.ctx, s, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.waitQueued()
	h.drain()
}

// get returns the Service as the API holds it.
func (h *harness) get(name string) *corev1.Service {
	h.t.Helper()
	s, err := h.client.CoreV1().Services("voip").Get(h.ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func (h *harness) delete(name string) {
	h.t.Helper()
	if err := h.client.CoreV1().Services("voip").Delete(h.ctx, name, metav1.DeleteOptions{}); err != nil {
		h.t.Fatal(err)
	}
	h.waitQueued()
	h.drain()
}

// waitQueued waits until a write's event has reached the queue. The informer updates its cache
// before it hands the event to the handler that enqueues, so a cache that caught up with the
// API (waitSynced) does not mean the key is queued yet: draining then would skip the write (a
// flake seen under -race on a loaded machine).
func (h *harness) waitQueued() {
	h.t.Helper()
	h.waitSynced()
	err := wait.PollUntilContextTimeout(h.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return h.s.queue.Len() > 0, nil
	})
	if err != nil {
		h.t.Fatalf("a write's event never reached the queue: %v", err)
	}
}

// recorded returns the node-port-ranges annotation of each Service, "-" when absent.
func (h *harness) recorded(names ...string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		v, ok := h.get(n).Annotations[annotation.NodePortRangesKey]
		if !ok {
			v = "-"
		}
		out[n] = v
	}
	return out
}

// blocks lists the allocator's blocks with their owners, "first-last owner".
func (h *harness) blocks() string {
	var out []string
	for _, b := range h.s.alloc.Snapshot().Blocks {
		out = append(out, b.Block.String()+" "+b.Owner)
	}
	return strings.Join(out, ", ")
}

// patches counts the patch requests sent so far.
func (h *harness) patches() int {
	n := 0
	for _, a := range h.client.Actions() {
		if a.GetVerb() == "patch" {
			n++
		}
	}
	return n
}

// runtimeObject shortens reactor signatures.
type runtimeObject = runtime.Object

var errForbidden = apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "a", errors.New("RBAC: denied"))
