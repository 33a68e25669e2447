package soak

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/tier"
)

// Binaries TestMain builds once: the daemon, and a byte-for-byte copy under another name that
// plays the "new version" in the upgrade scenario. Empty when the kernel tiers are skipped.
var (
	daemonBinary  string
	upgradeBinary string
)

// profile sizes every scenario. The short one runs in `go test ./...` (CI); the long one
// (NFTPROXY_SOAK=1) is the soak run `make soak` makes.
type profile struct {
	name string
	// traffic is how long the restart scenario sends traffic while the daemon is killed,
	// restarted and upgraded.
	traffic time.Duration
	// probeRate is new connections (or datagrams) per second to each traffic target.
	probeRate int
	// startKills are the delays after start at which a starting daemon is killed;
	// loadKills the delays after it logged that its manifests are loaded (its first sync
	// begins then).
	startKills, loadKills []time.Duration
	// fillers are extra Services in the restart lab, so a start-up sync has work to do.
	fillers int
	// churnServices, churnRate and churnFor shape the churn scenario: Services in the
	// manifests, EndpointSlice rewrites per second, and for how long.
	churnServices int
	churnRate     int
	churnFor      time.Duration
	// fullSync is the daemon's --full-sync-period in the drift scenario.
	fullSync time.Duration
	// fuzzFor is how long each fuzz target runs under `go test -fuzz` (0: seed corpus only, as
	// regular tests). Gathering the seeds' coverage alone takes tens of seconds.
	fuzzFor time.Duration
	// bigService is the number of ports of the "10k ports in one Service" hostile input.
	bigService int
}

var (
	short = profile{name: "short", traffic: 5 * time.Second, probeRate: 10,
		startKills: []time.Duration{0, 30 * time.Millisecond},
		loadKills:  []time.Duration{0, 2 * time.Millisecond, 5 * time.Millisecond},
		fillers:    200, churnServices: 1000, churnRate: 1000, churnFor: 5 * time.Second,
		fullSync: 2 * time.Second, bigService: 10000}
	long = profile{name: "long", traffic: 20 * time.Second, probeRate: 20,
		startKills: []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond,
			40 * time.Millisecond, 80 * time.Millisecond, 160 * time.Millisecond},
		loadKills: []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
			10 * time.Millisecond, 20 * time.Millisecond},
		fillers: 2000, churnServices: 10000, churnRate: 1000, churnFor: 60 * time.Second,
		fullSync: 2 * time.Second, fuzzFor: time.Minute, bigService: 10000}
)

// run is the profile of this run: long when NFTPROXY_SOAK is set.
var run = pick()

func pick() profile {
	if os.Getenv("NFTPROXY_SOAK") != "" {
		return long
	}
	return short
}

func TestMain(m *testing.M) {
	code := tier.Main(m, "soak", tier.SkipReason(), func(bin, dir string) error {
		// A byte-for-byte copy under another name plays the new version in the upgrade.
		next := filepath.Join(dir, "nftproxy-next")
		if err := copyFile(bin, next); err != nil {
			return fmt.Errorf("copy the daemon as its upgrade: %w", err)
		}
		daemonBinary, upgradeBinary = bin, next
		return nil
	})
	if daemonBinary != "" {
		report.Print(os.Stdout, run.name)
	}
	os.Exit(code)
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
