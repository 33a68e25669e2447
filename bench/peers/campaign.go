package peers

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/bench/probe"
	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// minPeerTime is the least time before the campaign's deadline worth starting a peer in.
const minPeerTime = 2 * time.Minute

// Addresses of the probe Services (inside the API server's service range, above the workload's).
var (
	probeVIP  = netip.MustParseAddr("198.19.250.1")
	probeEPs  = []netip.Addr{netip.MustParseAddr("198.18.15.1"), netip.MustParseAddr("198.18.15.2")}
	newSvcEP  = netip.MustParseAddr("198.18.15.3")
	newSvcNet = netip.MustParseAddr("198.19.251.0")
)

// Env is what a campaign needs from outside: the API server's admin clientset and a kubeconfig
// for a namespace (through a relay).
type Env struct {
	Client     kubernetes.Interface
	Kubeconfig func(t *probe.Topology) (string, error)
	Log        io.Writer
}

// Config is one campaign.
type Config struct {
	Sizes    []int
	Peers    []Peer
	Trials   int           // endpoint changes and new Services per peer and size
	Connects int           // first-packet connections per peer and size
	Limit    time.Duration // longest single wait (a start-up, a change, a restart)
	// PeerBudget bounds one peer at one size, all its waits together (0: only Limit). A peer
	// that spends it fails its row with what it was doing, and is not run at larger sizes.
	PeerBudget time.Duration
	// Deadline, when set, is when the campaign must be done (the report is written after it):
	// no wait runs past it, and a peer or size not started by then gets a row saying so.
	Deadline time.Time
	Seed     int64
	// LogDir, when set, receives each peer process's whole output, one file per peer, size and
	// process (e.g. "kube-proxy-iptables-v1.37.2-10000.log", "...-10000-restart.log").
	LogDir string
}

// Result is one peer at one size.
type Result struct {
	Peer Kind
	// Version is the kube-proxy peer's release (Peer.Version); empty for nftproxy and in
	// campaigns before two releases were compared.
	Version  string `json:",omitempty"`
	Services int
	Err      string // why the cell is missing, if it is
	// FullSync is the peer's first sync by its own metric; StartupToServing is from the
	// process start until the probe Service answers through it.
	FullSync, StartupToServing time.Duration
	StartupSyncs               int // syncs FullSync is the mean of
	// RestartSync is the first sync of a second process against the programmed kernel.
	RestartSync time.Duration
	// EndpointE2E / NewServiceE2E: API write until a new connection reaches the new endpoint /
	// the new Service. EndpointSync / NewServiceSync: the syncs' duration by the peer's metric.
	EndpointE2E, EndpointSync, NewServiceE2E, NewServiceSync []time.Duration
	// EndpointAPI / NewServiceAPI: the API writes' own time in those trials, from the first call
	// until the last one returned (a new Service is two: the Service, then its EndpointSlice):
	// the part of API→packet that the API server takes and no proxy can shorten.
	EndpointAPI, NewServiceAPI []time.Duration
	// OwnProgramming is the peer's kubeproxy_network_programming_duration_seconds per change.
	OwnProgramming []time.Duration
	// Notes say what was cut short without failing the row (e.g. fewer trials than asked).
	Notes       []string
	FirstPacket probe.Latencies
	Direct      probe.Latencies // the same connections straight to pod addresses (no Service)
	PeakRSS     int64
}

// Name is the peer's name (Peer.Name): its kind and release.
func (r Result) Name() string { return peerName(r.Peer, r.Version) }

func (e Env) logf(format string, a ...any) {
	if e.Log != nil {
		fmt.Fprintf(e.Log, format+"\n", a...)
	}
}

// Run measures every peer at every size, one peer at a time, against the API server in env.
func Run(ctx context.Context, env Env, cfg Config) ([]Result, error) {
	maxSize := 0
	for _, s := range cfg.Sizes {
		maxSize = max(maxSize, s)
	}
	w := workload.Generate(workload.DefaultSpec(maxSize, 10, cfg.Seed))
	probeSvc := ProbeService("probe", probeVIP, probeEPs[0])
	if err := Populate(ctx, env.Client, w, 0, 0, 1); err != nil { // namespaces and the Node
		return nil, err
	}
	if err := CreateService(ctx, env.Client, probeSvc); err != nil {
		return nil, err
	}
	var out []Result
	failedAt := map[string]int{} // a peer (by name) that failed at a size is not tried at larger ones
	have := 0
	late := func() bool { return !cfg.Deadline.IsZero() && time.Until(cfg.Deadline) < minPeerTime }
	for _, size := range cfg.Sizes {
		if late() {
			for _, p := range cfg.Peers {
				out = append(out, Result{Peer: p.Kind, Version: p.Version, Services: size, Err: "not run: the campaign's deadline came first"})
			}
			continue
		}
		start := time.Now()
		if err := Populate(ctx, env.Client, w, have, size, 16); err != nil {
			return out, fmt.Errorf("populate %d: %w", size, err)
		}
		env.logf("peers: %d Services in the API server (+%d in %s)", size, size-have, time.Since(start).Round(time.Millisecond))
		have = size
		targets := firstPacketTargets(w.Services[:size], 1000)
		for _, p := range cfg.Peers {
			r := Result{Peer: p.Kind, Version: p.Version, Services: size}
			if n, ok := failedAt[p.Name()]; ok {
				r.Err = fmt.Sprintf("not run: failed at %d Services", n)
				out = append(out, r)
				continue
			}
			if late() {
				r.Err = "not run: the campaign's deadline came first"
				out = append(out, r)
				continue
			}
			if err := runPeer(ctx, env, cfg, p, targets, &r); err != nil {
				failedAt[p.Name()] = size
				r.Err = err.Error()
				env.logf("peers: %s at %d: %v", p.Name(), size, err)
			}
			env.logf("peers: %s at %d: full %v, restart %v, endpoint e2e %v, new service e2e %v, first packet %v",
				p.Name(), size, r.FullSync, r.RestartSync, r.EndpointE2E, r.NewServiceE2E, r.FirstPacket)
			out = append(out, r)
		}
	}
	return out, nil
}

// firstPacketTargets are up to n ClusterIP:80 of plain TCP Services (no node port, range or all-ports).
func firstPacketTargets(svcs []*model.Service, n int) []netip.AddrPort {
	var out []netip.AddrPort
	step := max(1, len(svcs)/n)
	for i := 0; i < len(svcs) && len(out) < n; i += step {
		p := svcs[i].Ports[0]
		if p.Name.Protocol != model.TCP || p.Port != 80 || p.NodePort != 0 || p.AllPorts || p.IsRange() || p.ClusterIPs[0] == netip.MustParseAddr("198.19.0.1") {
			continue
		}
		out = append(out, netip.AddrPortFrom(p.ClusterIPs[0], 80))
	}
	return out
}

// budget bounds one peer at one size: every wait ends at the first of Limit and the peer's end.
type budget struct {
	limit time.Duration // Config.Limit: the longest single wait
	end   time.Time     // PeerBudget after the peer's start, or the campaign's Deadline
	total time.Duration
}

func newBudget(cfg Config) budget {
	b := budget{limit: cfg.Limit, total: cfg.PeerBudget}
	if cfg.PeerBudget > 0 {
		b.end = time.Now().Add(cfg.PeerBudget)
	}
	if !cfg.Deadline.IsZero() && (b.end.IsZero() || cfg.Deadline.Before(b.end)) {
		b.end = cfg.Deadline
	}
	return b
}

// wait is the limit for the next wait, and an error when nothing is left.
func (b budget) wait(what string) (time.Duration, error) {
	if b.end.IsZero() {
		return b.limit, nil
	}
	left := time.Until(b.end)
	if left <= 0 {
		return 0, fmt.Errorf("%s: not started, the peer's time budget (%s, or the campaign's deadline) is spent", what, b.total)
	}
	return min(b.limit, left), nil
}

// left is the time until the budget's end (a day when it has none).
func (b budget) left() time.Duration {
	if b.end.IsZero() {
		return 24 * time.Hour
	}
	return time.Until(b.end)
}

// runPeer measures p at one size, in the order that keeps the most important figures when a slow
// peer spends its budget: start-up (full sync), first packet, peak RSS, restart, then the
// endpoint-change and new-Service trials, which stop early (with a note) when the budget left
// could not hold another.
func runPeer(ctx context.Context, env Env, cfg Config, p Peer, targets []netip.AddrPort, r *Result) (err error) {
	bud := newBudget(cfg)
	topo, err := probe.New()
	if err != nil {
		return err
	}
	defer topo.Close()
	kc, err := env.Kubeconfig(topo)
	if err != nil {
		return err
	}
	vip := netip.AddrPortFrom(probeVIP, 80)
	log, closeLog := cfg.logFile(p.Name(), r.Services, "")
	defer closeLog()
	proc, err := Start(topo.Node, p, kc, log)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			env.logf("peers: %s output:\n%s", p.Name(), tail(proc.Output(), 3000))
		}
		proc.Stop()
	}()
	// A wait that gives up says what the peer was doing (e.g. which iptables-restore it was still
	// waiting for, and for how long), not only what did not happen.
	why := func(what string, err error) error {
		return fmt.Errorf("%s: %w; %s%s", what, err, proc.Diagnose(3), scrapeSummary(topo))
	}
	limit, err := bud.wait("start-up")
	if err != nil {
		return err
	}
	if r.StartupToServing, err = topo.WaitReply(vip, "", proc.Started, limit); err != nil {
		return why("start-up", err)
	}
	if limit, err = bud.wait("start-up"); err != nil {
		return err
	}
	m, err := waitQuiet(topo, proc, 2*time.Second, limit)
	if err != nil {
		return why("start-up", err)
	}
	// The mean of the syncs up to start-up quiet: the first one when the peer synced once.
	r.FullSync, r.StartupSyncs = delta(Metrics{}, m, syncMetric)
	// First packet: ClusterIPs of the workload, then the same number of connections straight to pods.
	if r.FirstPacket, err = topo.Connect(targets, cfg.Connects, time.Second); err != nil {
		return err
	}
	direct := []netip.AddrPort{netip.AddrPortFrom(netip.MustParseAddr("198.18.16.1"), probe.ServerPort)}
	if r.Direct, err = topo.Connect(direct, cfg.Connects, time.Second); err != nil {
		return err
	}
	r.PeakRSS = proc.PeakRSS()
	// Restart against the programmed kernel; the trials run on the second process.
	proc.Stop()
	log, closeLog2 := cfg.logFile(p.Name(), r.Services, "-restart")
	defer closeLog2()
	if proc, err = Start(topo.Node, p, kc, log); err != nil {
		return err
	}
	if limit, err = bud.wait("restart"); err != nil {
		return err
	}
	if m, err = waitQuiet(topo, proc, 2*time.Second, limit); err != nil {
		return why("restart", err)
	}
	r.RestartSync, _ = delta(Metrics{}, m, syncMetric)
	// trial runs one change n times while the budget left holds twice the longest one so far.
	trial := func(what string, one func(i int) error) error {
		var longest time.Duration
		for i := 0; i < cfg.Trials; i++ {
			if i > 0 && bud.left() < 2*longest {
				r.Notes = append(r.Notes, fmt.Sprintf("%s: %d of %d trials, the peer's time budget (%s) would not hold another", what, i, cfg.Trials, bud.total))
				return nil
			}
			t0 := time.Now()
			if err := one(i); err != nil {
				return err
			}
			longest = max(longest, time.Since(t0))
		}
		return nil
	}
	// Endpoint changes: the probe Service's one endpoint moves between two addresses.
	svc := ProbeService("probe", probeVIP, probeEPs[0])
	if err := trial("endpoint change", func(i int) error {
		ep := probeEPs[(i+1)%2]
		svc.Ports[0].Endpoints[0].Addr = ep
		before := m
		t0 := time.Now()
		if err := UpdateEndpoints(ctx, env.Client, svc); err != nil {
			return err
		}
		api := time.Since(t0)
		limit, err := bud.wait(fmt.Sprintf("endpoint change %d", i))
		if err != nil {
			return err
		}
		e2e, err := topo.WaitReply(vip, ep.String(), t0, limit)
		if err != nil {
			return why(fmt.Sprintf("endpoint change %d", i), err)
		}
		if m, err = waitQuiet(topo, proc, 1500*time.Millisecond, limit); err != nil {
			return why(fmt.Sprintf("endpoint change %d", i), err)
		}
		syncD, _ := delta(before, m, syncMetric)
		own, _ := delta(before, m, programmingMetric)
		r.EndpointE2E, r.EndpointSync, r.OwnProgramming = append(r.EndpointE2E, e2e), append(r.EndpointSync, syncD), append(r.OwnProgramming, own)
		r.EndpointAPI = append(r.EndpointAPI, api)
		return nil
	}); err != nil {
		return err
	}
	// Leave the probe as it was for the next peer.
	svc.Ports[0].Endpoints[0].Addr = probeEPs[0]
	if err := UpdateEndpoints(ctx, env.Client, svc); err != nil {
		return err
	}
	if limit, err = bud.wait("endpoint back"); err != nil {
		return err
	}
	if m, err = waitQuiet(topo, proc, 1500*time.Millisecond, limit); err != nil {
		return why("endpoint back", err)
	}
	// New Services, removed again afterwards.
	var created []*model.Service
	defer func() {
		for _, s := range created {
			_ = DeleteService(context.Background(), env.Client, s)
		}
	}()
	return trial("new Service", func(i int) error {
		b := newSvcNet.As4()
		b[3] = byte(i + 1)
		s := ProbeService(fmt.Sprintf("new-%d", i), netip.AddrFrom4(b), newSvcEP)
		before := m
		t0 := time.Now()
		if err := CreateService(ctx, env.Client, s); err != nil {
			return err
		}
		api := time.Since(t0)
		created = append(created, s)
		limit, err := bud.wait(fmt.Sprintf("new service %d", i))
		if err != nil {
			return err
		}
		e2e, err := topo.WaitReply(netip.AddrPortFrom(s.Ports[0].ClusterIPs[0], 80), newSvcEP.String(), t0, limit)
		if err != nil {
			return why(fmt.Sprintf("new service %d", i), err)
		}
		if m, err = waitQuiet(topo, proc, 1500*time.Millisecond, limit); err != nil {
			return why(fmt.Sprintf("new service %d", i), err)
		}
		syncD, _ := delta(before, m, syncMetric)
		r.NewServiceE2E, r.NewServiceSync = append(r.NewServiceE2E, e2e), append(r.NewServiceSync, syncD)
		r.NewServiceAPI = append(r.NewServiceAPI, api)
		return nil
	})
}

// restoreFailures is kube-proxy iptables mode's count of failed iptables-restore runs.
const restoreFailures = "kubeproxy_sync_proxy_rules_iptables_restore_failures_total"

// scrapeSummary is what the peer's metrics say about its syncs, for a failure's reason: how
// many it finished and their mean, and the failed iptables-restore runs (kube-proxy retries a
// failed restore, so a peer that never serves may be failing rather than slow).
func scrapeSummary(topo *probe.Topology) string {
	m, err := Scrape(topo.Node)
	if err != nil {
		return "; metrics: " + err.Error()
	}
	mean, n := delta(Metrics{}, m, syncMetric)
	s := fmt.Sprintf("; metrics: %d syncs done", n)
	if n > 0 {
		s += fmt.Sprintf(" (mean %s)", mean.Round(time.Millisecond))
	}
	if f := m[restoreFailures]; f > 0 {
		s += fmt.Sprintf(", %.0f iptables-restore runs failed", f)
	}
	return s
}

// waitQuiet waits until the peer has synced at least once and its sync count has not moved for
// quiet, and returns the last scrape.
func waitQuiet(topo *probe.Topology, proc *Proc, quiet, limit time.Duration) (Metrics, error) {
	deadline := time.Now().Add(limit)
	var last Metrics
	stable := time.Now()
	for time.Now().Before(deadline) {
		if ok, err := proc.Exited(); ok {
			return nil, fmt.Errorf("%s exited: %v", proc.Peer.Name(), err)
		}
		m, err := Scrape(topo.Node)
		if err == nil {
			if last == nil || m.Syncs() != last.Syncs() {
				stable = time.Now()
			}
			last = m
			if m.Syncs() > 0 && time.Since(stable) >= quiet {
				return m, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("%s: no quiet sync state within %s", proc.Peer.Name(), limit)
}

// logFile opens the file for one peer process's whole output under LogDir; nil (and a no-op
// close) without LogDir or when the file cannot be created.
func (cfg Config) logFile(peer string, size int, suffix string) (io.Writer, func()) {
	if cfg.LogDir == "" {
		return nil, func() {}
	}
	name := strings.ReplaceAll(peer, " ", "-") + "-" + strconv.Itoa(size) + suffix + ".log"
	f, err := os.Create(filepath.Join(cfg.LogDir, name))
	if err != nil {
		return nil, func() {}
	}
	return f, func() { f.Close() }
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
