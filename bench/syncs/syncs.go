// Package syncs measures nftproxy's control plane against the real kernel: a full sync from an
// empty namespace, a restart against a programmed kernel, partial syncs after endpoint changes
// and after a new Service, each split into our own time and the kernel's; and, for comparison,
// the same ruleset loaded as text with `nft -f`. See bench/README.md for the method and figures.
package syncs

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/bench/chains"
	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/netns"
)

// Phase is one measured step.
type Phase string

// Phases, in the order a run takes them.
const (
	Full        Phase = "full sync from empty"
	Restart     Phase = "restart (new proxier, programmed kernel)"
	OneEndpoint Phase = "partial: 1 endpoint changed"
	EndpointsX  Phase = "partial: 100 endpoints changed (100 Services)"
	NewService  Phase = "partial: 1 new Service"
	NftText     Phase = "nft -f of the same full ruleset"
	// The per-endpoint-chain layout (bench/chains), applied our way: one netlink batch each.
	ChainFull        Phase = "per-endpoint chains: full sync"
	ChainOneEndpoint Phase = "per-endpoint chains: 1 endpoint changed"
	ChainEndpointsX  Phase = "per-endpoint chains: 100 endpoints changed"
	ChainNewService  Phase = "per-endpoint chains: 1 new Service"
	// ChainSkipped holds, instead of the per-endpoint-chain phases, one Sample whose Skipped
	// says why that comparison was not measured at a shape (see chainSkip).
	ChainSkipped Phase = "per-endpoint chains"
)

// Phases lists the phases in table order.
var Phases = []Phase{Full, Restart, OneEndpoint, EndpointsX, NewService, NftText,
	ChainFull, ChainOneEndpoint, ChainEndpointsX, ChainNewService}

// ChainPhases are the per-endpoint-chain layout's phases; their Go time (building, transforming
// and diffing the whole ruleset in this benchmark, not a real proxy's code) is not measured.
var ChainPhases = []Phase{ChainFull, ChainOneEndpoint, ChainEndpointsX, ChainNewService}

// Sample is one phase of one run.
type Sample struct {
	Total time.Duration // wall time of the sync (or of the nft process)
	// Go is our own work: building fragments, diffing, planning (Total minus the rest).
	Go time.Duration
	// ReadBack is the time spent dumping the kernel's table (full syncs only).
	ReadBack time.Duration
	// Encode is the time Apply spent before the first byte reached the kernel.
	Encode time.Duration
	// Kernel is nft.Stats.Duration: from the first byte sent to the kernel's answer.
	Kernel time.Duration
	// User and Sys are the process's CPU time during the sync (all threads, GC included). The
	// kernel handles a netlink batch or dump inside our syscalls, so Sys is mostly the kernel's
	// work for us; unlike the wall times they do not grow when other jobs share the CPUs.
	User, Sys time.Duration
	// ChildUser and ChildSys are the CPU time of the `nft -f` process (nft -f only).
	ChildUser, ChildSys time.Duration
	Ops                 int
	Bytes               int
	// Skipped is why the phase was not measured (ChainSkipped only).
	Skipped string `json:",omitempty"`
}

// Config is one campaign.
type Config struct {
	Sizes     []int // Services, each with Endpoints per Service port
	Endpoints int   // per Service port
	// Shapes are further sizes with their own number of endpoints (e.g. 5000x50), measured
	// after Sizes, ShapeRuns times each (Runs when 0).
	Shapes    []Shape
	ShapeRuns int
	Runs      int
	// RunsAt lowers Runs for a size of Sizes (e.g. 50k, where one run takes minutes).
	RunsAt map[int]int
	Seed   int64
	// NoChains skips the per-endpoint-chain layout.
	NoChains bool
	// NoText skips the `nft -f` comparison.
	NoText bool
	// EndpointShards is the ruleset's number of endpoint-map shards (0: its default), to
	// compare layouts.
	EndpointShards int
	Log            io.Writer // one line per sample, when set
}

// runs is the number of runs for a shape: RunsAt for a size of Sizes, ShapeRuns for one of Shapes.
func (c Config) runs(s Shape) int {
	for _, n := range c.Sizes {
		if n == s.Services && s.Endpoints == c.Endpoints {
			if r, ok := c.RunsAt[n]; ok {
				return r
			}
			return c.Runs
		}
	}
	if c.ShapeRuns > 0 {
		return c.ShapeRuns
	}
	return c.Runs
}

// AllShapes is Sizes × Endpoints, then Shapes, each once.
func (c Config) AllShapes() []Shape {
	var out []Shape
	seen := map[Shape]bool{}
	add := func(s Shape) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for _, n := range c.Sizes {
		add(Shape{Services: n, Endpoints: c.Endpoints})
	}
	for _, s := range c.Shapes {
		add(s)
	}
	return out
}

// Results holds, per shape, every phase's samples.
type Results map[Shape]map[Phase][]Sample

// timed wraps the kernel to time the reconciler's reads and applies. It is a PackedDumper, as
// the daemon's kernel is, so the reconciler reads a restart back as it does in the daemon.
type timed struct {
	k          nft.Interface
	dump, appl time.Duration
	stats      nft.Stats
}

var _ nft.PackedDumper = (*timed)(nil)

func (t *timed) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	start := time.Now()
	st, err := t.k.Apply(ctx, tx)
	t.appl += time.Since(start)
	t.stats.Duration += st.Duration
	t.stats.Bytes += st.Bytes
	t.stats.Ops += st.Ops
	return st, err
}

func (t *timed) Dump(ctx context.Context, tb nft.Table) (*nft.Ruleset, error) {
	start := time.Now()
	rs, err := t.k.Dump(ctx, tb)
	t.dump += time.Since(start)
	return rs, err
}

// DumpPacked times the read-back the reconciler makes when its kernel offers it, as the daemon's
// nft.Kernel does: without it the reconciler fell back to Dump, and a restart was measured on a
// path the daemon does not take (every element unpacked, sorted and packed again).
func (t *timed) DumpPacked(ctx context.Context, tb nft.Table, each func(nft.Packed)) (*nft.Ruleset, error) {
	pd, ok := t.k.(nft.PackedDumper)
	if !ok {
		return nil, fmt.Errorf("dump table %s packed: %T cannot", tb, t.k)
	}
	start := time.Now()
	rs, err := pd.DumpPacked(ctx, tb, each)
	t.dump += time.Since(start)
	return rs, err
}

func (t *timed) ListTables(ctx context.Context, f nft.Family) ([]string, error) {
	return t.k.ListTables(ctx, f)
}

func (t *timed) reset() { t.dump, t.appl, t.stats = 0, 0, nft.Stats{} }

// sync runs one Sync and splits its time.
func (t *timed) sync(ctx context.Context, p *proxier.Proxier) (Sample, error) {
	t.reset()
	u0, s0 := cpuTimes()
	start := time.Now()
	_, err := p.Sync(ctx, false)
	total := time.Since(start)
	u1, s1 := cpuTimes()
	s := Sample{Total: total, User: u1 - u0, Sys: s1 - s0, ReadBack: t.dump, Encode: t.appl - t.stats.Duration, Kernel: t.stats.Duration,
		Ops: t.stats.Ops, Bytes: t.stats.Bytes}
	s.Go = total - t.dump - t.appl
	return s, err
}

// NewBuilder is the builder the benchmarks use (IPv4, default marks).
func NewBuilder() (*ruleset.Builder, error) { return newBuilder(0) }

// newBuilder is NewBuilder with the endpoint maps split into shards maps (0: the default).
func newBuilder(shards int) (*ruleset.Builder, error) {
	return ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000, EndpointShards: shards})
}

// Run measures every size Runs times. Each run uses fresh namespaces and the same workload (same
// seed); the changes of run r come from seed+r.
func Run(ctx context.Context, cfg Config) (Results, error) {
	out := Results{}
	var tooLarge []Shape // shapes where the per-endpoint-chain layout's batch did not fit
	for _, shape := range cfg.AllShapes() {
		out[shape] = map[Phase][]Sample{}
		for r := 0; r < cfg.runs(shape); r++ {
			c := cfg
			if len(out[shape][ChainSkipped]) > 0 {
				c.NoChains = true // skipped at this shape already
			} else if why := skipBefore(shape, tooLarge); why != "" {
				c.NoChains = true
				out[shape][ChainSkipped] = []Sample{{Skipped: why}}
			}
			samples, chainErr, err := runOnce(ctx, c, shape, cfg.Seed+int64(r))
			if err != nil {
				return out, fmt.Errorf("%d services × %d endpoints, run %d: %w", shape.Services, shape.Endpoints, r, err)
			}
			if chainErr != nil {
				why, large := chainSkip(chainErr)
				if large {
					tooLarge = append(tooLarge, shape)
				}
				out[shape][ChainSkipped] = []Sample{{Skipped: why}}
				for _, ph := range ChainPhases { // a run without them would make the medians lie
					delete(out[shape], ph)
				}
				if cfg.Log != nil {
					fmt.Fprintf(cfg.Log, "shape=%s run=%d per-endpoint chains skipped: %s\n", shape, r, why)
				}
			}
			for _, ph := range Phases {
				if _, ok := samples[ph]; !ok {
					continue
				}
				out[shape][ph] = append(out[shape][ph], samples[ph])
				if cfg.Log != nil {
					s := samples[ph]
					fmt.Fprintf(cfg.Log, "shape=%s run=%d phase=%q total=%v go=%v readback=%v encode=%v kernel=%v user=%v sys=%v ops=%d bytes=%d\n",
						shape, r, ph, s.Total, s.Go, s.ReadBack, s.Encode, s.Kernel, s.User, s.Sys, s.Ops, s.Bytes)
				}
			}
		}
	}
	return out, nil
}

// chainSkip is the decision for a per-endpoint-chain comparison that failed with err at a
// shape: the comparison is skipped there, with the reason returned for the report, and the
// campaign goes on (it is a layout we compare against, not nftproxy). large says the reason is
// its size (a full sync that cannot be one netlink batch): larger shapes then skip it without
// building it (skipBefore).
func chainSkip(err error) (reason string, large bool) {
	if nft.IsBatchTooLarge(err) {
		return fmt.Sprintf("not measured: its full sync cannot be one netlink batch (%v)", err), true
	}
	return fmt.Sprintf("not measured: it failed (%v)", err), false
}

// skipBefore is the reason to skip the per-endpoint-chain comparison at shape s without trying
// it, "" to try: its batch did not fit at a shape with no more endpoints in all.
func skipBefore(s Shape, tooLarge []Shape) string {
	for _, t := range tooLarge {
		if s.Services*s.Endpoints >= t.Services*t.Endpoints {
			return fmt.Sprintf("not measured: its full sync did not fit one netlink batch at %d Services × %d endpoints already", t.Services, t.Endpoints)
		}
	}
	return ""
}

// runOnce measures one run of shape. An error of the per-endpoint-chain comparison is returned
// apart (chainErr), with every other phase measured.
func runOnce(ctx context.Context, cfg Config, shape Shape, churnSeed int64) (got map[Phase]Sample, chainErr, err error) {
	spec := workload.DefaultSpec(shape.Services, shape.Endpoints, cfg.Seed)
	w := workload.Generate(spec)
	b, err := newBuilder(cfg.EndpointShards)
	if err != nil {
		return nil, nil, err
	}
	got = map[Phase]Sample{}

	// nft -f first, in its own namespace, from the untouched workload.
	if !cfg.NoText {
		if got[NftText], err = loadText(b, w); err != nil {
			return nil, nil, err
		}
	}

	ns, err := netns.Create("nftp-sync")
	if err != nil {
		return nil, nil, err
	}
	defer ns.Close()
	src := workload.NewSource(w.Node, w.Services)
	newProxier := func() (*proxier.Proxier, *timed, func(), error) {
		k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
		if err != nil {
			return nil, nil, nil, err
		}
		tk := &timed{k: k}
		return proxier.New(src, tk, []*ruleset.Builder{b}, nil, logr.Discard(), time.Now), tk, func() { k.Close() }, nil
	}
	p1, t1, close1, err := newProxier()
	if err != nil {
		return nil, nil, err
	}
	defer close1()
	if got[Full], err = t1.sync(ctx, p1); err != nil {
		return nil, nil, fmt.Errorf("full sync: %w", err)
	}
	p2, t2, close2, err := newProxier()
	if err != nil {
		return nil, nil, err
	}
	defer close2()
	if got[Restart], err = t2.sync(ctx, p2); err != nil {
		return nil, nil, fmt.Errorf("restart sync: %w", err)
	}
	// Churn is drawn from its own seed so runs differ in which Services change.
	w.Reseed(churnSeed)
	versions := [][]*model.Service{append([]*model.Service(nil), w.Services...)}
	steps := []struct {
		ph     Phase
		change func()
	}{
		{OneEndpoint, func() { src.Put(w.ChangeEndpoints(1)...) }},
		{EndpointsX, func() { src.Put(w.ChangeEndpoints(100)...) }},
		{NewService, func() { src.Put(w.AddService()) }},
	}
	for _, st := range steps {
		st.change()
		versions = append(versions, append([]*model.Service(nil), w.Services...))
		if got[st.ph], err = t2.sync(ctx, p2); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", st.ph, err)
		}
	}
	if !cfg.NoChains {
		if err := chainLayout(ctx, b, w.Node, versions, got); err != nil {
			for _, ph := range ChainPhases {
				delete(got, ph)
			}
			return got, err, nil
		}
	}
	return got, nil, nil
}

// chainLayout applies the same workload, version after version, in the per-endpoint-chain layout
// to a fresh namespace: the full ruleset, then each change as a diff. Only the Apply is timed.
func chainLayout(ctx context.Context, b *ruleset.Builder, node *model.Node, versions [][]*model.Service, got map[Phase]Sample) error {
	ns, err := netns.Create("nftp-chains")
	if err != nil {
		return err
	}
	defer ns.Close()
	k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		return err
	}
	defer k.Close()
	var prev *nft.Ruleset
	for i, ph := range ChainPhases {
		rs := chains.Transform(b.Ruleset(node, versions[i]), 0x4000)
		tx := chains.Full(rs)
		if prev != nil {
			tx = chains.Diff(prev, rs)
		}
		runtime.GC() // the rulesets of this layout are large: keep their garbage out of the timing
		u0, s0 := cpuTimes()
		start := time.Now()
		st, err := k.Apply(ctx, tx)
		total := time.Since(start)
		u1, s1 := cpuTimes()
		if err != nil {
			return fmt.Errorf("%s: %w", ph, err)
		}
		got[ph] = Sample{Total: total, Encode: total - st.Duration, Kernel: st.Duration, User: u1 - u0, Sys: s1 - s0, Ops: st.Ops, Bytes: st.Bytes}
		prev = rs
	}
	return nil
}

// loadText renders the full ruleset and loads it with `nft -f` into a fresh namespace; Go is the
// time to build and render the text, Total adds the nft process.
func loadText(b *ruleset.Builder, w *workload.Workload) (Sample, error) {
	ns, err := netns.Create("nftp-text")
	if err != nil {
		return Sample{}, err
	}
	defer ns.Close()
	u0, s0 := cpuTimes()
	start := time.Now()
	text := nft.Render(b.Ruleset(w.Node, w.Services))
	render := time.Since(start)
	cu0, cs0 := childTimes()
	if _, err := ns.RunStdin(text, "nft", "-f", "-"); err != nil {
		return Sample{}, fmt.Errorf("nft -f: %w", err)
	}
	total := time.Since(start)
	u1, s1 := cpuTimes()
	cu1, cs1 := childTimes()
	return Sample{Total: total, Go: render, Kernel: total - render, Bytes: len(text), User: u1 - u0, Sys: s1 - s0,
		ChildUser: cu1 - cu0, ChildSys: cs1 - cs0}, nil
}

// childTimes is the user and system CPU time of the process's waited-for children so far.
func childTimes() (user, sys time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_CHILDREN, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

// cpuTimes is the process's user and system CPU time so far.
func cpuTimes() (user, sys time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
