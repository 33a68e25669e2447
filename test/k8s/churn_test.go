package k8s

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

const (
	// churnNS holds the churned Services (the canary stays in testNS).
	churnNS = "churn"
	// churnPool is how many pod addresses churned endpoints are drawn from (pods 3 and up:
	// nothing answers on them; only the canary's pods 1 and 2 exist).
	churnPool = 200
)

// churnPods are the endpoints of churned Service i at version v: two pods of the pool.
func churnPods(i, v int) []netip.Addr {
	return []netip.Addr{lab.PodIPv4(3 + (i+v)%churnPool), lab.PodIPv4(3 + (i+v+7)%churnPool)}
}

// churnSlice is the EndpointSlice of churned Service i at version v, as the EndpointSlice
// controller writes it: the trigger time is when the change that caused it happened.
func churnSlice(i, v int, trigger time.Time) *discoveryv1.EndpointSlice {
	name := churnName(i)
	port, proto, pname := int32(80), corev1.ProtocolTCP, "http"
	ready, node := true, fixture.NodeName
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: churnNS, Name: name + "-v4",
			Labels:      map[string]string{discoveryv1.LabelServiceName: name},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger.UTC().Format(time.RFC3339Nano)}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}
	for _, a := range churnPods(i, v) {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{a.String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node})
	}
	return sl
}

func churnName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// writer is one API client of the churn and the Services it alone writes (i % clients ==
// its index), so no two writers race on a slice and resourceVersions stay its own.
type writer struct {
	cs      kubernetes.Interface
	mine    []int
	version map[int]int    // last version the API server accepted
	rv      map[int]string // resourceVersion of the slice it last wrote
	writes  int
	errors  int
	lastErr error
}

// update writes version v of Service i's slice, refetching its resourceVersion once on a
// conflict.
func (w *writer) update(ctx context.Context, i, v int) error {
	sl := churnSlice(i, v, time.Now())
	sl.ResourceVersion = w.rv[i]
	got, err := w.cs.DiscoveryV1().EndpointSlices(churnNS).Update(ctx, sl, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		cur, gerr := w.cs.DiscoveryV1().EndpointSlices(churnNS).Get(ctx, sl.Name, metav1.GetOptions{})
		if gerr != nil {
			return gerr
		}
		sl.ResourceVersion = cur.ResourceVersion
		got, err = w.cs.DiscoveryV1().EndpointSlices(churnNS).Update(ctx, sl, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	w.rv[i], w.version[i] = got.ResourceVersion, v
	return nil
}

// newWriters makes n clients with no client-side rate limit (the API server's own limits are
// what the churn measures).
func (e *env) newWriters(n, services int) []*writer {
	e.t.Helper()
	ws := make([]*writer, n)
	for k := range ws {
		cfg := e.c.Config()
		cfg.QPS, cfg.Burst = -1, 0
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			e.t.Fatal(err)
		}
		ws[k] = &writer{cs: cs, version: map[int]int{}, rv: map[int]string{}}
	}
	for i := 1; i <= services; i++ {
		ws[i%n].mine = append(ws[i%n].mine, i)
	}
	return ws
}

// parallel runs fn for every writer at once and returns the first error.
func parallel(ws []*writer, fn func(w *writer) error) error {
	errs := make(chan error, len(ws))
	for _, w := range ws {
		go func() { errs <- fn(w) }()
	}
	var first error
	for range ws {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// createChurnServices creates the churned Services (ClusterIPs allocated by the API server)
// and version 0 of their slices; it returns how long that took.
func (e *env) createChurnServices(ws []*writer) time.Duration {
	e.t.Helper()
	start := time.Now()
	if _, err := e.cs.CoreV1().Namespaces().Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: churnNS}}, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create namespace %s: %v", churnNS, err)
	}
	err := parallel(ws, func(w *writer) error {
		for _, i := range w.mine {
			svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: churnNS, Name: churnName(i)},
				Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
					Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
			if _, err := w.cs.CoreV1().Services(churnNS).Create(e.ctx, svc, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("create Service %s: %w", svc.Name, err)
			}
			got, err := w.cs.DiscoveryV1().EndpointSlices(churnNS).Create(e.ctx, churnSlice(i, 0, time.Now()), metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create EndpointSlice of %s: %w", svc.Name, err)
			}
			w.rv[i], w.version[i] = got.ResourceVersion, 0
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return time.Since(start)
}

// TestChurnThroughTheAPIServer is the soak's churn in Kubernetes mode: many Services, then
// EndpointSlice updates through the real API server by several clients at the rate the
// profile asks (what the API server sustains is reported), each with the trigger time the
// EndpointSlice controller would write. It reports what test/soak reports for manifest mode:
// programming latency from the daemon's metric (now measured from the trigger time), a canary
// moved from pod-1 to pod-2 mid-churn and probed with packets, syncs, failures, convergence
// and peak RSS, and checks that the kernel ends exactly at the last version of every slice.
// Figures only: no time is asserted. The long profile (10k Services, part of `make soak`):
//
//	NFTPROXY_SOAK=1 go test -v -count=1 -timeout 60m -run TestChurnThroughTheAPIServer ./test/k8s/
func TestChurnThroughTheAPIServer(t *testing.T) {
	run := churnRun()
	const scenario = "3 churn (Kubernetes mode, API server)"
	var fig tier.Figures
	defer fig.Print(os.Stdout, run.name)
	e := newEnvFor(t, nil, run.churnFor+30*time.Minute)
	canary := httpService("canary", 250, 1)
	e.createService(canary)
	ws := e.newWriters(run.clients, run.services)
	created := e.createChurnServices(ws)
	fig.Add(t, scenario, "Services", "%d (+1 canary), created through the API in %v by %d clients (%.0f objects/s)",
		run.services, created.Round(time.Millisecond), run.clients, float64(2*run.services)/created.Seconds())

	want := e.desiredChurn(ws, 1)
	programmed := e.waitKernel(want, 10*time.Minute)
	fig.Add(t, scenario, "initial load", "every Service in the kernel %v after the last create", programmed.Round(time.Millisecond))
	if got, err := e.kernelEndpoints(); err != nil || got.diff(e.desiredChurn(ws, 2)) == "" {
		t.Fatalf("the state check cannot tell the canary on pod-1 from pod-2 (read error: %v)", err)
	}
	canaryVIP := vip(canary)
	r := e.lab.Client(1).Dial(e.ctx, "tcp", canaryVIP)
	if r.Outcome != lab.Replied || r.Reply.Pod != e.lab.Pod(1).Name {
		t.Fatalf("canary before the churn: got %v, want a reply from %s", r, e.lab.Pod(1).Name)
	}

	before, err := e.scrape()
	if err != nil {
		t.Fatal(err)
	}
	moved := e.watchCanary(canaryVIP, e.lab.Pod(2).Name)

	// The writers keep to rate x elapsed between them (a ticket each), not to ticks a busy
	// machine would drop; a writer behind schedule writes back to back.
	var tickets atomic.Int64
	start := time.Now()
	var canaryAt time.Time
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(run.churnFor / 2)
		canaryAt = time.Now()
		e.setEndpointsTriggered(canary, 2)
	}()
	err = parallel(ws, func(w *writer) error {
		for time.Since(start) < run.churnFor {
			due := int64(time.Since(start).Seconds() * float64(run.rate))
			if n := tickets.Load(); n >= due || !tickets.CompareAndSwap(n, n+1) {
				time.Sleep(time.Millisecond)
				continue
			}
			i := w.mine[rand.IntN(len(w.mine))]
			if err := w.update(e.ctx, i, w.version[i]+1); err != nil {
				w.errors++
				w.lastErr = err
				continue
			}
			w.writes++
		}
		return nil
	})
	churnEnd := time.Now()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	elapsed := churnEnd.Sub(start)
	writes, apiErrors := 0, 0
	for _, w := range ws {
		writes, apiErrors = writes+w.writes, apiErrors+w.errors
		if w.lastErr != nil {
			t.Logf("writer: %d failed updates, the last: %v", w.errors, w.lastErr)
		}
	}

	// The final state: the last version of every slice, exactly, and the canary on pod-2.
	want = e.desiredChurn(ws, 2)
	converged := e.waitKernel(want, 10*time.Minute)
	var seen time.Time
	ok := false
	select {
	case seen, ok = <-moved:
	case <-time.After(waitBound):
	}
	after, err := e.scrape()
	if err != nil {
		t.Fatal(err)
	}
	syncs := tier.Delta(before, after, `nftproxy_sync_duration_seconds_count{kind="partial"}`) +
		tier.Delta(before, after, `nftproxy_sync_duration_seconds_count{kind="full"}`)
	failures := tier.Delta(before, after, "nftproxy_sync_failures_total")
	lastSync := time.Unix(0, int64(after["nftproxy_last_sync_timestamp_seconds"]*1e9))
	const lat = "nftproxy_network_programming_duration_seconds"

	fig.Add(t, scenario, "endpoint changes", "%d EndpointSlice updates in %v (%.0f/s achieved, target %d/s, %d clients, %d API errors)",
		writes, elapsed.Round(time.Millisecond), float64(writes)/elapsed.Seconds(), run.rate, run.clients, apiErrors)
	fig.Add(t, scenario, "syncs / failures", "%.0f / %.0f (churn and convergence)", syncs, failures)
	fig.Add(t, scenario, "network programming latency", "p50 %s, p99 %s (%s from the slices' trigger time, %.0f observations)",
		tier.Seconds(tier.Quantile(before, after, lat, 0.5)), tier.Seconds(tier.Quantile(before, after, lat, 0.99)), lat, tier.Delta(before, after, lat+"_count"))
	fig.Add(t, scenario, "peak RSS of the daemon (VmHWM)", "%s", peakRSS(daemonBinary))
	fig.AddCanary(t, scenario, canaryAt, seen, churnEnd, ok)
	if !ok {
		t.Errorf("the canary's endpoint change was never answered by pod-2")
	}
	fig.Add(t, scenario, "convergence", "the daemon's last sync %v after the churn stopped (nftproxy_last_sync_timestamp_seconds); "+
		"the final state confirmed by the test %v after", lastSync.Sub(churnEnd).Round(time.Millisecond), converged.Round(time.Millisecond))
	fig.Add(t, scenario, "final state", "every slice's last version exactly in the kernel (%d Services + canary)", run.services)
	if failures > 0 {
		t.Errorf("%.0f syncs failed during the churn; want 0", failures)
	}
	select {
	case <-e.daemon.Done():
		t.Errorf("the daemon exited: %v", e.daemon.Err())
	default:
	}
}

// setEndpointsTriggered moves s's slice to pods, with a trigger time of now (a failure is
// reported, the churn goes on).
func (e *env) setEndpointsTriggered(s fixture.Service, pods ...int) {
	s.Endpoints = fixture.Pods(pods...)
	next := s.Slices()[0]
	next.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: time.Now().UTC().Format(time.RFC3339Nano)}
	cur, err := e.cs.DiscoveryV1().EndpointSlices(testNS).Get(e.ctx, next.Name, metav1.GetOptions{})
	if err == nil {
		next.ResourceVersion = cur.ResourceVersion
		_, err = e.cs.DiscoveryV1().EndpointSlices(testNS).Update(e.ctx, next, metav1.UpdateOptions{})
	}
	if err != nil {
		e.t.Errorf("move the canary to %v: %v", pods, err)
	}
}

// watchCanary probes vip from client-1 every 50 ms until pod answers; the channel gets when,
// and is closed without a value if the test's context ends first.
func (e *env) watchCanary(vip, pod string) <-chan time.Time {
	moved := make(chan time.Time, 1)
	go func() {
		defer close(moved)
		for {
			select {
			case <-e.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			if r := e.lab.Client(1).Dial(e.ctx, "tcp", vip); r.Outcome == lab.Replied && r.Reply.Pod == pod {
				moved <- time.Now()
				return
			}
		}
	}()
	return moved
}
