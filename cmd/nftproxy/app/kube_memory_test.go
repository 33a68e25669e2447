package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/bench/peers"
	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/netns"
)

// TestKubeMemoryProfile is a measurement, not a check: Kubernetes mode's memory at start-up. It
// fills a test API server with the bench workload (N Services × E endpoints, as bench/report's
// peers do), starts the Kubernetes source exactly as `nftproxy run --kubeconfig` builds it
// (client-go set-up, informers, slim transform) feeding a real Tracker, then runs the daemon's
// first sync into a kernel in a fresh network namespace (root). It reports the peak heap and
// the peak RSS (VmHWM, reset before the source starts) until the informers have synced and
// after the first sync, the live heap after a GC, and writes the heap profile. Run it with:
//
//	NFTPROXY_KUBE_MEMPROFILE=DIR [NFTPROXY_KUBE_MEMPROFILE_SERVICES=10000] [NFTPROXY_KUBE_MEMPROFILE_ENDPOINTS=10] go test -count=1 -timeout 30m -run TestKubeMemoryProfile -v ./cmd/nftproxy/app/
func TestKubeMemoryProfile(t *testing.T) {
	out := os.Getenv("NFTPROXY_KUBE_MEMPROFILE")
	if out == "" {
		t.Skip("a measurement: set NFTPROXY_KUBE_MEMPROFILE=DIR (heap profiles are written there)")
	}
	netns.Skip(t)
	services, endpoints := envInt(t, "NFTPROXY_KUBE_MEMPROFILE_SERVICES", 10000), envInt(t, "NFTPROXY_KUBE_MEMPROFILE_ENDPOINTS", 10)
	c := cluster.Start(t, cluster.Options{SingleStack: true, NodePortRange: "30000-60000",
		APIServerArgs: []string{"--service-cluster-ip-range=198.19.0.0/16", "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000"}})
	populate(t, c, services, endpoints)

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := c.Admin().WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	o := &Options{}
	if err := parseFlags("run", o, runFlags, []string{"--kubeconfig", kubeconfig, "--hostname-override", "bench-node"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	runtime.MemProfileRate = 64 << 10
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("VmHWM not reset (%v): peak RSS includes populating the API server", err)
	}
	stop := sampleHeap()
	start := time.Now()
	src, err := newSource(o, logr.Discard(), nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tracker := model.NewTracker(model.TrackerConfig{NodeName: o.NodeName, Logger: logr.Discard()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, tracker, func() {}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for !src.Ready() {
		if time.Since(start) > 10*time.Minute {
			t.Fatal("the informers did not sync in 10 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	synced := time.Since(start)
	peak := stop()
	hwm := vmHWM()
	t.Logf("%d Services × %d endpoints: informers synced in %v; %d Services in the model; peak heap in use until then (sampled every 2 ms) %.1f MB; peak RSS (VmHWM) %s",
		services, endpoints, synced.Round(time.Millisecond), len(tracker.Snapshot().Services), mib(peak), hwm)

	// The daemon's first sync, into a kernel in a fresh network namespace.
	stop = sampleHeap()
	ns := netns.New(t, "kmem")
	kernel, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kernel.Close() })
	builders, err := o.builders()
	if err != nil {
		t.Fatal(err)
	}
	p := proxier.New(tracker, kernel, builders, nil, logr.Discard(), time.Now)
	if _, err := p.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	syncPeak := stop()
	t.Logf("first sync: peak heap in use %.1f MB; peak RSS (VmHWM) since the source started %s", mib(syncPeak), vmHWM())

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f, err := os.Create(filepath.Join(out, "kube-heap.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Logf("live heap after the first sync (HeapInuse after GC) %.1f MB, objects (HeapAlloc) %.1f MB", mib(ms.HeapInuse), mib(ms.HeapAlloc))
	t.Logf("heap profile: go tool pprof -sample_index=inuse_space -top %s", filepath.Join(out, "kube-heap.pprof"))
	runtime.KeepAlive(p)
}

// populate creates the bench workload's Services, EndpointSlices and Node in c. A loaded API
// server sometimes refuses a Service with "provided IP is already allocated" (a create that
// timed out left its ClusterIP allocated); that Service then takes any free ClusterIP, which
// changes nothing measured here.
func populate(t *testing.T, c *cluster.Cluster, services, endpoints int) {
	t.Helper()
	rc := c.Config()
	rc.QPS, rc.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	wl := workload.Generate(workload.DefaultSpec(services, endpoints, 1))
	start := time.Now()
	if err := peers.Populate(ctx, cs, wl, 0, 0, 1); err != nil { // namespaces and the Node
		t.Fatal(err)
	}
	work := make(chan *model.Service)
	errs := make(chan error, len(wl.Services))
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for s := range work {
				errs <- createService(ctx, cs, s)
			}
		})
	}
	for _, s := range wl.Services {
		work <- s
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("populated %d Services in %v", services, time.Since(start).Round(time.Millisecond))
}

// createService creates s's Service and EndpointSlice; a Service refused its ClusterIP (see
// populate) takes any.
func createService(ctx context.Context, cs kubernetes.Interface, s *model.Service) error {
	err := peers.CreateService(ctx, cs, s)
	if err == nil || !strings.Contains(err.Error(), "already allocated") {
		return err
	}
	svc := workload.ServiceObject(s)
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	if _, err := cs.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("service %s/%s, any ClusterIP: %w", svc.Namespace, svc.Name, err)
	}
	return peers.CreateService(ctx, cs, s) // the slice; the Service exists
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// sampleHeap samples the heap in use (objects plus unused spans) every 2 ms until the returned
// function is called, which returns the largest value seen.
func sampleHeap() func() uint64 {
	var peak atomic.Uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64() + s[1].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		<-finished
		return peak.Load()
	}
}

func vmHWM() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
