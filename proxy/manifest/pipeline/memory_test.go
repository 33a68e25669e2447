package pipeline_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/manifest/pipeline"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

// TestMemoryProfile is a measurement, not a check: it loads the bench workload (N Services × E
// endpoints, the objects `bench/cmd/manifests` writes) through manifest mode's real path —
// manifest files, pipeline, tracker, proxier, reconciler — into a real kernel in a fresh network
// namespace (root) or a kernel that accepts everything (otherwise), and reports the live heap
// after the first full sync (HeapInuse after a GC), the peak heap while loading and syncing
// (sampled), the process's peak RSS over the same span (VmHWM, reset before the load), and
// writes the heap profile for `go tool pprof -sample_index=inuse_space -top`.
//
//	NFTPROXY_MEMPROFILE=DIR [NFTPROXY_MEMPROFILE_SERVICES=10000] [NFTPROXY_MEMPROFILE_ENDPOINTS=10] go test -count=1 -run TestMemoryProfile -v ./proxy/manifest/pipeline/
func TestMemoryProfile(t *testing.T) {
	out := os.Getenv("NFTPROXY_MEMPROFILE")
	if out == "" {
		t.Skip("a measurement: set NFTPROXY_MEMPROFILE=DIR (heap profiles are written there)")
	}
	services, endpoints := tier.EnvInt(t, "NFTPROXY_MEMPROFILE_SERVICES", 10000), tier.EnvInt(t, "NFTPROXY_MEMPROFILE_ENDPOINTS", 10)
	dir := t.TempDir()
	writeWorkload(t, dir, services, endpoints)

	var kernel nft.Interface = acceptAll{}
	kernelName := "accept-all (no root)"
	if os.Geteuid() == 0 {
		ns := netns.New(t, "mem")
		k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		kernel, kernelName = k, "real, netns "+ns.Name
	}

	// A finer sampling than the default (one sample per 512 KiB) so the profile's small
	// holders are not noise; set before the measured allocations.
	runtime.MemProfileRate = 64 << 10
	runtime.GC()
	debug.FreeOSMemory()
	tier.ResetPeakRSS(t, "writing the workload")
	stop := tier.SamplePeakHeap()

	start := time.Now()
	a, err := nodeport.New(nodeport.Config{NodePortRange: allocator.MustParseRange("30000-60000")}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	tracker := model.NewTracker(model.TrackerConfig{NodeName: "bench-node", Logger: logr.Discard()})
	pl := pipeline.New(pipeline.Config{Dir: dir, Loader: manifest.Loader{}, Assigner: a, Tracker: tracker,
		NodeName: "bench-node", Log: logr.Discard()})
	if _, err := pl.Load(); err != nil {
		t.Fatal(err)
	}
	loaded := time.Since(start)
	loadPeak := stop()
	stop = tier.SamplePeakHeap()
	// Both families, as the daemon's default --ip-families.
	var builders []*ruleset.Builder
	for _, fam := range []nft.Family{nft.IPv4, nft.IPv6} {
		b, err := ruleset.NewBuilder(ruleset.Config{Family: fam, Table: "nftproxy", MasqueradeMark: 0x4000, DropMark: 0x8000, NodeName: "bench-node"})
		if err != nil {
			t.Fatal(err)
		}
		builders = append(builders, b)
	}
	p := proxier.New(tracker, kernel, builders, nil, logr.Discard(), time.Now)
	res, err := p.Sync(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	synced := time.Since(start)
	peakHeap := stop()
	hwm := tier.PeakRSS(os.Getpid())

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	f, err := os.Create(filepath.Join(out, "heap.pprof"))
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	t.Logf("%d Services × %d endpoints, kernel %s: load %v, load+sync %v, %d ops, %d bytes sent",
		services, endpoints, kernelName, loaded.Round(time.Millisecond), synced.Round(time.Millisecond), res.Ops, res.Stats.Bytes)
	for fam, c := range res.Objects {
		t.Logf("%s table: %d chains, %d rules, %d sets, %d elements", fam, c.Chains, c.Rules, c.Sets, c.Elements)
	}
	t.Logf("live heap after the sync (HeapInuse after GC): %.1f MB, of which objects (HeapAlloc) %.1f MB; peak heap in use (sampled every 2 ms) while loading %.1f MB, while syncing %.1f MB; peak RSS (VmHWM): %s; GC cycles %d; GOGC %q, GOMEMLIMIT %q",
		tier.MiB(ms.HeapInuse), tier.MiB(ms.HeapAlloc), tier.MiB(loadPeak), tier.MiB(peakHeap), hwm, ms.NumGC, os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"))
	t.Logf("heap profile: go tool pprof -sample_index=inuse_space -top %s", filepath.Join(out, "heap.pprof"))
	runtime.KeepAlive(p)
	runtime.KeepAlive(pl)
}

// writeWorkload writes what bench/cmd/manifests writes: the Node, then each Service and its
// EndpointSlice, as one file of JSON documents.
func writeWorkload(t *testing.T, dir string, services, endpoints int) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "workload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	wl := workload.Generate(workload.DefaultSpec(services, endpoints, 1))
	if err := fixture.Write(w, wl.NodeObject()); err != nil {
		t.Fatal(err)
	}
	trigger := time.Unix(1_800_000_000, 0)
	for _, s := range wl.Services {
		if err := fixture.Write(w, workload.ServiceObject(s), workload.SliceObject(s, trigger)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// acceptAll is a kernel that takes every transaction and holds nothing, for runs without root.
type acceptAll struct{ nft.Interface }

func (acceptAll) Apply(context.Context, *nft.Transaction) (nft.Stats, error) {
	return nft.Stats{}, nil
}
func (acceptAll) Dump(context.Context, nft.Table) (*nft.Ruleset, error) {
	return nil, syscall.ENOENT
}
