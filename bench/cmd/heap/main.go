// Command heap measures manifest mode's memory in process: it writes the bench workload (N
// Services × E endpoints, the objects bench/cmd/manifests writes), loads it through manifest
// mode's real path — manifest files, pipeline, tracker, proxier, reconciler — into a real kernel
// in a fresh network namespace, and prints the live heap after the first full sync (HeapInuse
// after a GC), the peak heap while loading and while syncing (sampled every 2 ms), the process's
// peak RSS over the same span (VmHWM, reset before the load), and writes the heap profile for
// `go tool pprof -sample_index=inuse_space -top`. Needs root.
//
//	go run ./bench/cmd/heap -out DIR [-services 10000] [-endpoints 10]
//
// bench/cmd/memory measures the binary's peak RSS instead; this one shows where the heap goes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
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
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

func main() {
	services := flag.Int("services", 10000, "Services of the bench workload")
	endpoints := flag.Int("endpoints", 10, "endpoints per Service port")
	out := flag.String("out", "", "directory to write heap.pprof into (required; created)")
	flag.Parse()
	if *out == "" || *services <= 0 || *endpoints <= 0 {
		fmt.Fprintln(os.Stderr, "heap: -out DIR is required; -services and -endpoints must be positive")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "heap: needs root (creates a network namespace)")
		os.Exit(2)
	}
	if err := measure(*out, *services, *endpoints); err != nil {
		fmt.Fprintln(os.Stderr, "heap:", err)
		os.Exit(1)
	}
}

func measure(out string, services, endpoints int) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "nftproxy-heap-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f, err := os.Create(filepath.Join(dir, "workload.yaml"))
	if err != nil {
		return err
	}
	if err := workload.Generate(workload.DefaultSpec(services, endpoints, 1)).WriteManifest(f); err != nil {
		f.Close()
		return fmt.Errorf("write the workload: %w", err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	ns, err := netns.Create("nftp-heap")
	if err != nil {
		return err
	}
	defer ns.Close()
	kernel, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		return err
	}
	defer kernel.Close()

	// A finer sampling than the default (one sample per 512 KiB) so the profile's small
	// holders are not noise; set before the measured allocations.
	runtime.MemProfileRate = 64 << 10
	runtime.GC()
	debug.FreeOSMemory()
	if err := tier.ResetPeakRSS(); err != nil {
		fmt.Printf("VmHWM not reset (%v): peak RSS includes writing the workload\n", err)
	}
	stop := tier.SamplePeakHeap()
	start := time.Now()
	a, err := nodeport.New(nodeport.Config{NodePortRange: allocator.MustParseRange("30000-60000")}, logr.Discard())
	if err != nil {
		return err
	}
	tracker := model.NewTracker(model.TrackerConfig{NodeName: "bench-node", Logger: logr.Discard()})
	pl := pipeline.New(pipeline.Config{Dir: dir, Loader: manifest.Loader{}, Assigner: a, Tracker: tracker,
		NodeName: "bench-node", Log: logr.Discard()})
	if _, err := pl.Load(); err != nil {
		return err
	}
	loaded := time.Since(start)
	loadPeak := stop()
	stop = tier.SamplePeakHeap()
	// Both families, as the daemon's default --ip-families.
	var builders []*ruleset.Builder
	for _, fam := range []nft.Family{nft.IPv4, nft.IPv6} {
		b, err := ruleset.NewBuilder(ruleset.Config{Family: fam, Table: "nftproxy", MasqueradeMark: 0x4000, DropMark: 0x8000, NodeName: "bench-node"})
		if err != nil {
			return err
		}
		builders = append(builders, b)
	}
	p := proxier.New(tracker, kernel, builders, nil, logr.Discard(), time.Now)
	res, err := p.Sync(context.Background(), true)
	if err != nil {
		return err
	}
	synced := time.Since(start)
	syncPeak := stop()
	hwm := tier.PeakRSS(os.Getpid())

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	profile := filepath.Join(out, "heap.pprof")
	if err := writeHeapProfile(profile); err != nil {
		return err
	}
	fmt.Printf("%d Services × %d endpoints, kernel in netns %s: load %v, load+sync %v, %d ops, %d bytes sent\n",
		services, endpoints, ns.Name, loaded.Round(time.Millisecond), synced.Round(time.Millisecond), res.Ops, res.Stats.Bytes)
	for fam, c := range res.Objects {
		fmt.Printf("%s table: %d chains, %d rules, %d sets, %d elements\n", fam, c.Chains, c.Rules, c.Sets, c.Elements)
	}
	fmt.Printf("live heap after the sync (HeapInuse after GC): %.1f MB, of which objects (HeapAlloc) %.1f MB; peak heap in use (sampled every 2 ms) while loading %.1f MB, while syncing %.1f MB; peak RSS (VmHWM): %s; GC cycles %d; GOGC %q, GOMEMLIMIT %q\n",
		tier.MiB(ms.HeapInuse), tier.MiB(ms.HeapAlloc), tier.MiB(loadPeak), tier.MiB(syncPeak), hwm, ms.NumGC, os.Getenv("GOGC"), os.Getenv("GOMEMLIMIT"))
	fmt.Printf("heap profile: go tool pprof -sample_index=inuse_space -top %s\n", profile)
	runtime.KeepAlive(p)
	runtime.KeepAlive(pl)
	return nil
}

// writeHeapProfile writes the heap profile (in-use and allocated samples) to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}
