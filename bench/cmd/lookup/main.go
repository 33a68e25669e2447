// Command lookup measures the per-packet cost of the service dispatch lookups for nftproxy's
// candidate map layouts and prints a markdown table (see bench/README.md). Needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/nftproxy/nftproxy/bench/lookup"
)

func main() {
	sizes := flag.String("sizes", "100,10000,30000", "numbers of exact-port Services, comma separated")
	ranges := flag.Int("ranges", 100, "port-range Services beside them")
	allPorts := flag.Int("allports", 10, "all-ports Services beside them")
	repeat := flag.Int("repeat", 8, "dispatches per packet")
	packets := flag.Int("packets", 100000, "packets per flood")
	rounds := flag.Int("rounds", 7, "alternating rounds (figures are medians over them)")
	dests := flag.Int("dests", 1024, "distinct destinations per pattern")
	verbose := flag.Bool("v", false, "print every flood to stderr")
	flag.Parse()
	if reason := lookup.Skip(); reason != "" {
		fmt.Fprintln(os.Stderr, "lookup:", reason)
		os.Exit(2)
	}
	cfg := lookup.Config{Ranges: *ranges, AllPorts: *allPorts, Repeat: *repeat, Packets: *packets, Rounds: *rounds, Dests: *dests}
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "lookup: bad size %q\n", s)
			os.Exit(2)
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	var log io.Writer = io.Discard
	if *verbose {
		log = os.Stderr
	}
	cfg.Log = log
	res, err := lookup.Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "lookup:", err)
		os.Exit(1)
	}
	fmt.Printf("%d range + %d all-ports Services beside the exact ones; %d dispatches per packet; %d packets per flood; %d rounds; CPU time of the sending thread\n\n",
		cfg.Ranges, cfg.AllPorts, cfg.Repeat, cfg.Packets, cfg.Rounds)
	lookup.Markdown(os.Stdout, cfg, res)
}
