package report

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/bench/peers"
	"github.com/nftproxy/nftproxy/bench/probe"
	"github.com/nftproxy/nftproxy/bench/syncs"
	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

var (
	full       = flag.Bool("full", false, "run the full campaign and write bench/REPORT.md (make bench)")
	out        = flag.String("out", "", "directory for REPORT.md, results.json and plots (default: bench/ with -full, a temp dir otherwise)")
	syncSizes  = flag.String("sync-sizes", "1000,10000,50000", "control-plane sizes with -full")
	syncRuns   = flag.Int("sync-runs", 5, "control-plane runs per size with -full")
	runs50k    = flag.Int("sync-runs-50k", 1, "control-plane runs at 50,000 Services (one run takes minutes)")
	syncShapes = flag.String("sync-shapes", "5000x50", "control-plane shapes with their own endpoints per Service port, SERVICESxENDPOINTS, with -full (5000x50: upstream Kubernetes issue #135639's 250k endpoints)")
	shapeRuns  = flag.Int("sync-runs-shapes", 3, "control-plane runs per -sync-shapes shape")
	peerSizes  = flag.String("peer-sizes", "100,1000,10000,30000", "peer campaign sizes with -full; empty skips the peers")
	peerTrials = flag.Int("peer-trials", 5, "endpoint changes and new Services per peer and size")
	connects   = flag.Int("connects", 3000, "first-packet connections per peer and size")
	rerender   = flag.String("rerender", "", "measure nothing: rewrite REPORT.md and the plots next to this results.json")
	// For measuring one peer alone, e.g. kube-proxy iptables mode at 10k with its log at -v=4:
	// -full -sync-sizes= -ranges=false -peer-sizes 10000 -peers iptables -kube-proxy-args=--v=4 -peer-logs DIR
	peerKinds    = flag.String("peers", "nftproxy,nftables,iptables", "peers to run: nftproxy, nftables (kube-proxy nftables mode), iptables (kube-proxy iptables mode)")
	peerLimit    = flag.Duration("peer-limit", 30*time.Minute, "longest wait for one peer's start-up, change or restart with -full")
	peerBudget   = flag.Duration("peer-budget", 75*time.Minute, "longest run of one peer at one size, all its waits together, with -full")
	peerLogs     = flag.String("peer-logs", "", "directory for each peer process's whole output (default: not kept)")
	kubeProxy    = flag.String("kube-proxy", "", "kube-proxy binary to run instead of test/cluster's (its --version names it in the report)")
	kubeProxyVer = flag.String("kube-proxy-versions", cluster.KubeProxyLatestVersion+","+cluster.KubeVersion,
		"kube-proxy releases test/cluster builds to run side by side as peers, each in the -peers modes")
	kubeProxyArg = flag.String("kube-proxy-args", "", "extra kube-proxy flags, space-separated (e.g. --v=4)")
	withRanges   = flag.Bool("ranges", true, "measure the port-range cost")
)

func ints(t *testing.T, s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("bad size %q", f)
		}
		out = append(out, n)
	}
	return out
}

// TestReport is the benchmark campaign. Without -full it is CI's smoke test: tiny sizes, one run,
// the report written to a temp dir, and it checks only correctness (every phase ran and sent
// what it must, every peer synced and served, no connection failed), never durations.
func TestReport(t *testing.T) {
	if *rerender != "" {
		b, err := os.ReadFile(*rerender)
		if err != nil {
			t.Fatal(err)
		}
		var r Results
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		if err := Write(filepath.Dir(*rerender), &r); err != nil {
			t.Fatal(err)
		}
		return
	}
	netns.Skip(t)
	ctx := context.Background()
	r := &Results{Started: time.Now(), Machine: Machine(strings.Join(kubeProxyReleases(t), ", "))}
	r.Machine["campaign flags"] = setFlags()
	dir := *out
	cfg := syncs.Config{Sizes: []int{200}, Endpoints: 10, Runs: 1, Seed: 1}
	pcfg := peers.Config{Sizes: []int{100}, Trials: 2, Connects: 200, Limit: time.Minute, Seed: 1}
	rangeServices, rangeRuns, rangeConnects := 200, 2, 100
	if *full {
		if dir == "" {
			dir = ".."
		}
		shapes, err := syncs.ParseShapes(*syncShapes, 10)
		if err != nil {
			t.Fatal(err)
		}
		cfg = syncs.Config{Sizes: ints(t, *syncSizes), Endpoints: 10, Shapes: shapes, ShapeRuns: *shapeRuns, Runs: *syncRuns,
			RunsAt: map[int]int{50000: *runs50k}, Seed: 1}
		pcfg = peers.Config{Sizes: ints(t, *peerSizes), Trials: *peerTrials, Connects: *connects, Limit: *peerLimit, PeerBudget: *peerBudget, Seed: 1}
		rangeServices, rangeRuns, rangeConnects = 10000, 5, *connects
	} else if dir == "" {
		dir = t.TempDir()
	}
	pcfg.LogDir = *peerLogs
	// The peers stop in time for the report to be written before go test's -timeout ends the run
	// (which would lose every figure measured so far).
	if end, ok := t.Deadline(); ok {
		pcfg.Deadline = end.Add(-5 * time.Minute)
	}
	r.SyncConfig = cfg
	var err error
	if len(cfg.AllShapes()) > 0 {
		t.Logf("control plane: sizes %v", cfg.Sizes)
		if r.Syncs, err = syncs.Run(ctx, cfg); err != nil {
			r.SyncErr = err.Error()
			t.Errorf("syncs: %v", err)
		}
	}
	if *withRanges {
		t.Logf("ranges: %d Services", rangeServices)
		r.RangeServices = rangeServices
		if r.Ranges, err = MeasureRanges(ctx, rangeServices, rangeRuns, rangeConnects); err != nil {
			r.RangesErr = err.Error()
			t.Errorf("ranges: %v", err)
		}
	}
	if len(pcfg.Sizes) > 0 && !skipCluster() {
		r.Peers, err = runPeers(t, ctx, pcfg)
		if err != nil {
			r.PeersErr = err.Error()
			t.Errorf("peers: %v", err)
		}
	}
	r.Finished = time.Now()
	if err := Write(dir, r); err != nil {
		t.Fatal(err)
	}
	t.Logf("report written to %s", filepath.Join(dir, "REPORT.md"))
	check(t, r)
}

func skipCluster() bool {
	return testing.Short() || os.Getenv("NFTPROXY_SKIP_CLUSTER") != "" || os.Getenv("NFTPROXY_UNIT_ONLY") != ""
}

// peerCluster starts the API server the peers watch and builds the nftproxy binary they run.
func peerCluster(t *testing.T) (c *cluster.Cluster, nftproxy string) {
	c = cluster.Start(t, cluster.Options{SingleStack: true, NodePortRange: "30000-60000",
		APIServerArgs: []string{"--service-cluster-ip-range=198.19.0.0/16", "--max-requests-inflight=2000", "--max-mutating-requests-inflight=1000"}})
	bin, err := tier.BuildDaemon(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return c, bin
}

// peerEnv is what the peers need of c: a client allowed to populate thousands of Services
// quickly, and each peer's kubeconfig.
func peerEnv(t *testing.T, c *cluster.Cluster) peers.Env {
	rc := c.Config()
	rc.QPS, rc.Burst = 2000, 4000
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return peers.Env{Client: cs, Log: logWriter{t}, Kubeconfig: func(topo *probe.Topology) (string, error) {
		return c.KubeconfigFor(t, topo.Node, c.Admin()), nil
	}}
}

// kubeProxyReleases are the kube-proxy releases the peers run: -kube-proxy's (asked with
// --version), else -kube-proxy-versions.
func kubeProxyReleases(t *testing.T) []string {
	if *kubeProxy != "" {
		out, err := exec.Command(*kubeProxy, "--version").Output()
		if err != nil {
			t.Fatalf("-kube-proxy %s --version: %v", *kubeProxy, err)
		}
		v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "Kubernetes ")
		if !ok || v == "" {
			t.Fatalf("-kube-proxy %s --version: %q names no release", *kubeProxy, out)
		}
		return []string{v}
	}
	var out []string
	for _, v := range strings.Split(*kubeProxyVer, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

func runPeers(t *testing.T, ctx context.Context, cfg peers.Config) ([]peers.Result, error) {
	c, bin := peerCluster(t)
	kpArgs := strings.Fields(*kubeProxyArg)
	want := map[string]bool{}
	for _, k := range strings.Split(*peerKinds, ",") {
		want[strings.TrimSpace(k)] = true
	}
	if want["nftproxy"] {
		cfg.Peers = append(cfg.Peers, peers.Peer{Kind: peers.NFTProxy, Binary: bin})
	}
	_, noIPTables := exec.LookPath("iptables-restore")
	if noIPTables != nil && want["iptables"] {
		t.Log("iptables-restore not found: kube-proxy iptables mode skipped (apt-get install iptables)")
	}
	// Each mode in each release: a mode's releases run one after the other, so they are side by
	// side in the report's tables.
	bins := map[string]string{}
	for _, v := range kubeProxyReleases(t) {
		bins[v] = *kubeProxy
		if *kubeProxy == "" {
			b, err := c.Binaries.KubeProxyAt(v)
			if err != nil {
				t.Fatalf("-kube-proxy-versions: %v", err)
			}
			bins[v] = b
		}
	}
	for _, mode := range []struct {
		name string
		kind peers.Kind
	}{{"nftables", peers.KubeProxyNFTables}, {"iptables", peers.KubeProxyIPTables}} {
		if !want[mode.name] || (mode.kind == peers.KubeProxyIPTables && noIPTables != nil) {
			continue
		}
		for _, v := range kubeProxyReleases(t) {
			cfg.Peers = append(cfg.Peers, peers.Peer{Kind: mode.kind, Version: v, Binary: bins[v], Args: kpArgs})
		}
	}
	return peers.Run(ctx, peerEnv(t, c), cfg)
}

type logWriter struct{ t *testing.T }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func check(t *testing.T, r *Results) {
	for size, res := range r.Syncs {
		for _, ph := range []syncs.Phase{syncs.Full, syncs.OneEndpoint, syncs.NewService, syncs.ChainFull, syncs.ChainOneEndpoint} {
			for _, s := range res[ph] {
				if s.Ops == 0 {
					t.Errorf("%s, %s: sent nothing", size, ph)
				}
			}
		}
		for _, s := range res[syncs.Restart] {
			if s.Ops != 0 {
				t.Errorf("%s, restart: sent %d ops, want 0", size, s.Ops)
			}
		}
	}
	for _, c := range r.Ranges {
		if c.FirstPacket.Failed > 0 || len(c.FirstPacket.Samples) == 0 {
			t.Errorf("range cost, %s: %d connections failed, %d succeeded", c.Kind, c.FirstPacket.Failed, len(c.FirstPacket.Samples))
		}
	}
	for _, p := range r.Peers {
		// In the full campaign an upstream peer that fails a size (kube-proxy iptables mode at
		// 10k does not serve within the limit) is a finding, reported in its row; nftproxy
		// failing is not.
		if p.Err != "" && *full && p.Peer != peers.NFTProxy {
			t.Logf("%s at %d Services: %s", p.Peer, p.Services, p.Err)
		} else if p.Err != "" {
			t.Errorf("%s at %d Services: %s", p.Peer, p.Services, p.Err)
		}
		if p.FirstPacket.Failed > 0 {
			t.Errorf("%s at %d Services: %d of %d first-packet connections failed", p.Peer, p.Services, p.FirstPacket.Failed, p.FirstPacket.Failed+len(p.FirstPacket.Samples))
		}
	}
}

// setFlags is the campaign's flags given on the command line (the test binary's own -test.*
// left out), so a report says how far it departs from `make bench`'s defaults.
func setFlags() string {
	var out []string
	flag.Visit(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, "test.") && f.Name != "out" && f.Name != "peer-logs" {
			out = append(out, "-"+f.Name+"="+f.Value.String())
		}
	})
	return strings.Join(out, " ")
}
