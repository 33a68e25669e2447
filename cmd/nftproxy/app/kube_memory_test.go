package app

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/bench/peers"
	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/k8s"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

// BenchmarkKubeMemoryProfile measures Kubernetes mode's memory at start-up. It fills a test API
// server with the bench workload (N Services × E endpoints, as bench/report's peers do), then,
// each iteration, starts the Kubernetes source exactly as `nftproxy run --kubeconfig` builds it
// (client-go set-up, streamed initial lists, informers, slim transform) feeding a real Tracker,
// and runs the daemon's first sync into a kernel in a fresh network namespace (root). With
// NFTPROXY_KUBE_MEMPROFILE_LISTS=1 the initial lists are lists, as before the binary streamed
// them (for the comparison). It reports the peak heap until the informers have synced and during
// the first sync, the live heap after a GC, and logs the peak RSS (VmHWM, reset before the
// source starts); with NFTPROXY_KUBE_MEMPROFILE=DIR it writes the heap profile there. Run it
// once (the API server's population is set-up, not measured):
//
//	[NFTPROXY_KUBE_MEMPROFILE=DIR] [NFTPROXY_KUBE_MEMPROFILE_SERVICES=10000] [NFTPROXY_KUBE_MEMPROFILE_ENDPOINTS=10] go test -run '^$' -bench KubeMemoryProfile -benchtime 1x -timeout 30m ./cmd/nftproxy/app/
func BenchmarkKubeMemoryProfile(b *testing.B) {
	netns.Skip(b)
	out := os.Getenv("NFTPROXY_KUBE_MEMPROFILE")
	services, endpoints := tier.EnvInt(b, "NFTPROXY_KUBE_MEMPROFILE_SERVICES", 10000), tier.EnvInt(b, "NFTPROXY_KUBE_MEMPROFILE_ENDPOINTS", 10)
	c := cluster.Start(b, cluster.Options{SingleStack: true, NodePortRange: "30000-60000",
		APIServerArgs: []string{"--service-cluster-ip-range=198.19.0.0/16", "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000"}})
	populate(b, c, services, endpoints)

	kubeconfig := filepath.Join(b.TempDir(), "kubeconfig")
	if err := c.Admin().WriteKubeconfig(kubeconfig); err != nil {
		b.Fatal(err)
	}
	// As the binary does before anything else (cmd/nftproxy's main); restored for the tests
	// that follow in this process, some of which run informers on fake clients.
	prev := clientfeatures.FeatureGates()
	if os.Getenv("NFTPROXY_KUBE_MEMPROFILE_LISTS") == "" {
		k8s.StreamInitialLists()
	}
	b.Cleanup(func() { clientfeatures.ReplaceFeatureGates(prev) })
	o := &Options{}
	if err := parseFlags("run", o, runFlags, []string{"--kubeconfig", kubeconfig, "--hostname-override", "bench-node"}, io.Discard); err != nil {
		b.Fatal(err)
	}
	runtime.MemProfileRate = 64 << 10
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		kubeMemoryOnce(b, o, services, endpoints, out)
	}
}

// kubeMemoryOnce is one measurement of BenchmarkKubeMemoryProfile: a new source and tracker
// from the informers' start to the first sync's end.
func kubeMemoryOnce(b *testing.B, o *Options, services, endpoints int, out string) {
	b.StopTimer()
	runtime.GC()
	debug.FreeOSMemory()
	if err := tier.ResetPeakRSS(); err != nil {
		b.Logf("VmHWM not reset (%v): peak RSS includes populating the API server", err)
	}
	stop := tier.SamplePeakHeap()
	b.StartTimer()
	start := time.Now()
	src, err := newSource(o, logr.Discard(), nil, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	tracker := model.NewTracker(model.TrackerConfig{NodeName: o.NodeName, Logger: logr.Discard()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, tracker, func() {}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	for !src.Ready() {
		if time.Since(start) > 10*time.Minute {
			b.Fatal("the informers did not sync in 10 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	synced := time.Since(start)
	peak := stop()
	hwm := tier.PeakRSS(os.Getpid())
	b.Logf("%d Services × %d endpoints: informers synced in %v; %d Services in the model; peak heap in use until then (sampled every 2 ms) %.1f MB; peak RSS (VmHWM) %s",
		services, endpoints, synced.Round(time.Millisecond), len(tracker.Snapshot().Services), tier.MiB(peak), hwm)

	// The daemon's first sync, into a kernel in a fresh network namespace.
	b.StopTimer()
	ns := netns.New(b, "kmem")
	kernel, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		b.Fatal(err)
	}
	defer kernel.Close()
	builders, err := o.builders()
	if err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	stop = tier.SamplePeakHeap()
	p := proxier.New(tracker, kernel, builders, nil, logr.Discard(), time.Now)
	if _, err := p.Sync(ctx, true); err != nil {
		b.Fatal(err)
	}
	syncPeak := stop()
	b.StopTimer()
	b.Logf("first sync: peak heap in use %.1f MB; peak RSS (VmHWM) since the source started %s", tier.MiB(syncPeak), tier.PeakRSS(os.Getpid()))

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b.ReportMetric(tier.MiB(peak), "informers-peak-heap-MiB")
	b.ReportMetric(tier.MiB(syncPeak), "sync-peak-heap-MiB")
	b.ReportMetric(tier.MiB(ms.HeapInuse), "live-heap-MiB")
	b.Logf("live heap after the first sync (HeapInuse after GC) %.1f MB, objects (HeapAlloc) %.1f MB", tier.MiB(ms.HeapInuse), tier.MiB(ms.HeapAlloc))
	if out != "" {
		path := filepath.Join(out, "kube-heap.pprof")
		f, err := os.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		f.Close()
		b.Logf("heap profile: go tool pprof -sample_index=inuse_space -top %s", path)
	}
	runtime.KeepAlive(p)
	b.StartTimer()
}

// populate creates the bench workload's Services, EndpointSlices and Node in c.
func populate(t testing.TB, c *cluster.Cluster, services, endpoints int) {
	t.Helper()
	rc := c.Config()
	rc.QPS, rc.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	wl := workload.Generate(workload.DefaultSpec(services, endpoints, 1))
	start := time.Now()
	if err := peers.Populate(context.Background(), cs, wl, 0, len(wl.Services), 8); err != nil {
		t.Fatal(err)
	}
	t.Logf("populated %d Services in %v", services, time.Since(start).Round(time.Millisecond))
}
