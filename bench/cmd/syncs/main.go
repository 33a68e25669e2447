// Command syncs measures nftproxy's sync cost against the real kernel (full, restart, partial)
// and the `nft -f` text path, and prints markdown tables (see bench/README.md). Needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/pprof"

	"github.com/nftproxy/nftproxy/bench/syncs"
)

func main() {
	sizes := flag.String("sizes", "1000,10000", "numbers of Services, comma separated; SERVICESxENDPOINTS (e.g. 5000x50) sets a size's own endpoints per Service port")
	endpoints := flag.Int("endpoints", 10, "endpoints per Service port, for sizes without their own")
	runs := flag.Int("runs", 5, "runs per size (fresh namespaces each)")
	seed := flag.Int64("seed", 1, "workload seed")
	quick := flag.Bool("quick", false, "CI mode: 1000 Services, 3 runs")
	verbose := flag.Bool("v", false, "print every sample to stderr")
	chains := flag.Bool("chains", true, "also measure the per-endpoint-chain layout (skipped, with the reason, at sizes where it cannot run)")
	text := flag.Bool("nft-text", true, "also load the same ruleset with nft -f")
	shards := flag.Int("endpoint-shards", 0, "split the endpoint maps into this many shards (0: the ruleset's default), to compare layouts")
	opsBase := flag.Int("ops", 10000, "count the ops one Service of each shape costs after this many workload Services (in-memory kernel); 0: no")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole campaign to this file")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "syncs: needs root (creates network namespaces)")
		os.Exit(2)
	}
	cfg := syncs.Config{Endpoints: *endpoints, Runs: *runs, Seed: *seed, NoChains: !*chains, NoText: !*text, EndpointShards: *shards}
	if *quick {
		*sizes, cfg.Runs = "1000", 3
	}
	shapes, err := syncs.ParseShapes(*sizes, *endpoints)
	if err != nil || len(shapes) == 0 {
		fmt.Fprintf(os.Stderr, "syncs: -sizes %q: %v\n", *sizes, err)
		os.Exit(2)
	}
	cfg.Shapes = shapes
	cfg.Log = io.Discard
	if *verbose {
		cfg.Log = os.Stderr
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "syncs:", err)
			os.Exit(1)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "syncs:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	res, err := syncs.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "syncs:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	syncs.Markdown(os.Stdout, res)
	if *opsBase > 0 {
		rows, full, err := syncs.ServiceOps(context.Background(), *opsBase, 100)
		if err != nil {
			fmt.Fprintln(os.Stderr, "syncs: ops per Service:", err)
			os.Exit(1)
		}
		syncs.OpsMarkdown(os.Stdout, *opsBase, 100, rows, full)
	}
}
