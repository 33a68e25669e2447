// Command drift measures how the daemon's loop sees and repairs drift: `nft flush ruleset` and
// one map element deleted by another netlink socket, at N Services of the bench workload, in a
// fresh network namespace (bench/README.md, section C). Needs root. Nothing is asserted; the
// figures are printed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nftproxy/nftproxy/bench/syncs"
)

func main() {
	services := flag.Int("services", 10000, "Services of the bench workload")
	endpoints := flag.Int("endpoints", 10, "endpoints per Service port")
	idle := flag.Duration("idle", 10*time.Second, "how long nothing changes while the process's CPU time is measured")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "drift: needs root (creates network namespaces)")
		os.Exit(2)
	}
	if *services <= 0 || *endpoints <= 0 {
		fmt.Fprintf(os.Stderr, "drift: -services %d -endpoints %d: both must be positive\n", *services, *endpoints)
		os.Exit(2)
	}
	r, err := syncs.MeasureDrift(context.Background(), *services, *endpoints, *idle)
	if err != nil {
		fmt.Fprintln(os.Stderr, "drift:", err)
		os.Exit(1)
	}
	fmt.Println(r)
}
