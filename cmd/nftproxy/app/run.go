package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/conntrack"
	"github.com/nftproxy/nftproxy/proxy/explain"
	"github.com/nftproxy/nftproxy/proxy/health"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeaddr"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

func runCmd(args []string, stdout, stderr io.Writer) error {
	var o Options
	if err := parseFlags("run", &o, runFlags, args, stderr); err != nil {
		return err
	}
	log := newLogger(o.Verbosity, stderr)
	ctx, signals, stop := handleSignals(log, "run")
	defer stop()
	defer boundShutdown(ctx, stderr)()
	o.logConfig(log)
	if err := o.resolveFromNode(ctx, log); err != nil {
		return err
	}
	o.warnNoClusterTraffic(log)
	builders, err := o.builders()
	if err != nil {
		return usageError{err}
	}
	guard, err := o.guard()
	if err != nil {
		return usageError{err}
	}

	reg := prometheus.NewRegistry()
	if err := registerComponentMetrics(reg); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	pm, err := metrics.NewProxy(reg, model.AllReasons(), families(builders)...)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	am, err := metrics.NewAllocatorMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	// rescan, once the source exists, sends Events for rejections the informers did not see
	// (a Service the kernel refused); set before anything runs.
	var rescan func()
	status := explain.NewStatus() // what `nftproxy explain` reads at /rejections
	tracker := newTracker(&o, guard, log, pm, status, func() {
		if rescan != nil {
			rescan()
		}
	})
	// The node's local addresses are known before any Service is programmed, so the guard holds
	// from the first sync; the daemon then follows their changes.
	localAddrs, err := nodeaddr.List(nil)
	if err != nil {
		return err
	}
	if err := checkServiceCIDRs(o.ServiceCIDRs, localAddrs, "held by the kernel in nftproxy's network namespace"); err != nil {
		return usageError{err}
	}
	tracker.SetLocalAddresses(localAddrs)
	if err := pm.WatchPending(tracker.Pending); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if err := watchModel(pm, tracker, builders); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}

	if o.Once {
		return runOnce(ctx, &o, log, tracker, builders, pm, am)
	}
	kernel, err := nft.NewKernel()
	if err != nil {
		return fmt.Errorf("open netlink to nftables: %w (run as root or with CAP_NET_ADMIN)", err)
	}
	defer kernel.Close()
	if err := checkTableOwned(ctx, kernel, o.Table); err != nil {
		return usageError{err}
	}
	ctm, err := metrics.NewConntrack(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	hcm, err := metrics.NewHealthCheck(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	var sources []string // the API server's state is followed below, from the health state
	if o.Manifests != "" {
		sources = append(sources, manifestSourceLabel)
	}
	sm, err := metrics.NewSource(reg, sources...)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	cleaner, err := conntrack.New(log.WithName("conntrack"), conntrack.WithObserver(ctm))
	if err != nil {
		return err
	}
	defer cleaner.Close()

	src, err := newSource(&o, log, am, sm, pm)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) || o.Manifests == "" {
			return usageError{err}
		}
		return err
	}
	if r, ok := src.(interface{ Rescan() }); ok {
		rescan = r.Rescan
	}
	if ms, ok := src.(*manifestSource); ok {
		ms.status = status
	}
	p := proxier.New(tracker, kernel, builders, pm, log, time.Now)
	p.SetMaxServiceCost(o.MaxServiceCost)
	p.AddHook("conntrack", conntrack.NewHook(cleaner))
	rc := o.runConfig()
	refused := make(chan error, 1)
	rc.Ready = readyAfterCIDRCheck(src.Ready, o.ServiceCIDRs, tracker.NodeAddresses, func(err error) {
		refused <- err
		stop()
	})
	runner := proxier.NewRunner(p, rc)
	signals.OnHangup(runner.SuspectDrift)
	hs := &health.State{
		LastSuccess:  func() time.Time { return runner.Status().LastSuccess },
		FailingSince: func() time.Time { return runner.Status().FailingSince },
		PendingSince: tracker.PendingSince,
		Progress:     func() time.Time { return runner.Status().Progress },
		Ready:        src.Ready,
		Timeout:      o.HealthzTimeout,
		// Reported (body, nftproxy_source_up, log), never a 503: the rules keep serving, and
		// load balancers must not drop every node because the control plane is away.
		SourceFailingSince: src.FailingSince,
		Now:                time.Now,
		Served:             pm.Served,
	}
	if nd, ok := src.(nodeDrainer); ok {
		hs.NodeDraining = nd.NodeDraining
	}
	if o.Manifests == "" {
		// The manifest source pushes its state (newSource); the API server's is the health
		// state's view of the informers.
		sm.Follow(apiServerSourceLabel, hs.SourceUp)
	}
	if err := metrics.WatchHealth(reg, hs.NodeEligible); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	// Health-check node ports follow the rules' state only (hs.Healthy), on the
	// --nodeport-addresses only, as kube-proxy's.
	hc := health.NewCheckServer(health.CheckConfig{NodeName: o.NodeName, Healthy: hs.Healthy, NodePortCIDRs: o.NodePortCIDRs, Observer: hcm, Log: log.WithName("healthcheck")})
	defer hc.Close()
	// Ports another process holds (kube-proxy, until it exits in a migration) are opened as
	// soon as it lets them go, whether or not a sync happens.
	go func() { _ = hc.Run(ctx) }()
	p.AddHook("health-check node ports", hc)
	dm, err := metrics.NewDrift(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if o.DriftEvents {
		defer watchDrift(ctx, log, kernel, builders, runner, dm, rc.FullSyncPeriod)()
	}
	watchErr := make(chan error, 1)
	notify := queuing(pm, tracker, runner.Notify)
	go func() { watchErr <- src.Run(ctx, tracker, notify) }()
	go watchNodeAddresses(ctx, log, tracker, o.ServiceCIDRs, notify)
	if err := watchLocalPorts(ctx, &o, log, tracker, reg); err != nil {
		return err
	}

	servers, err := serve(ctx, log, &o, hs, reg, status)
	if err != nil {
		return err
	}
	defer servers()

	log.Info("nftproxy running", "version", Version, "manifests", o.Manifests, "node", o.NodeName, "families", o.Families)
	done := make(chan struct{})
	go func() { runner.Run(ctx); close(done) }()
	select {
	case <-ctx.Done():
	case err := <-watchErr:
		if err != nil && ctx.Err() == nil {
			stop()
			<-done
			return fmt.Errorf("source %s: %w", src, err)
		}
	}
	<-done
	select {
	case err := <-refused:
		return usageError{fmt.Errorf("nothing programmed: %w", err)}
	default:
	}
	log.Info("nftproxy stopped; the rules stay in the kernel (nftproxy cleanup removes them)")
	return nil
}

// runOnce is `run --once`: load the manifests, apply one full sync, exit. A manifest directory
// that cannot be read fails before the kernel is opened, so the rules in place stay: a missing
// directory is not "no Services".
func runOnce(ctx context.Context, o *Options, log logr.Logger, tracker *model.Tracker, builders []*ruleset.Builder, pm *metrics.Proxy, am *metrics.AllocatorMetrics) error {
	if o.Manifests == "" {
		return usageError{errors.New("--once needs --manifests: the directory of Service, EndpointSlice and Node manifests to apply")}
	}
	if err := loadOnce(o, log, tracker, am, pm); err != nil {
		return err
	}
	if err := checkServiceCIDRs(o.ServiceCIDRs, tracker.NodeAddresses(), nodeAddressesOrigin); err != nil {
		return usageError{fmt.Errorf("nothing applied, the kernel is unchanged: %w", err)}
	}
	kernel, err := nft.NewKernel()
	if err != nil {
		return fmt.Errorf("open netlink to nftables: %w (run as root or with CAP_NET_ADMIN)", err)
	}
	defer kernel.Close()
	if err := checkTableOwned(ctx, kernel, o.Table); err != nil {
		return usageError{err}
	}
	cleaner, err := conntrack.New(log.WithName("conntrack"))
	if err != nil {
		return err
	}
	defer cleaner.Close()
	p := proxier.New(tracker, kernel, builders, pm, log, time.Now)
	p.SetMaxServiceCost(o.MaxServiceCost)
	p.AddHook("conntrack", conntrack.NewHook(cleaner))
	res, err := p.Sync(ctx, true)
	if err != nil {
		return err
	}
	log.Info("applied", "ops", res.Ops, "repairs", res.Repairs, "bytes", res.Stats.Bytes, "kernelTime", res.Stats.Duration)
	return nil
}

// loadOnce is run --once's load: the manifests through the pipeline into tracker, before the
// kernel is opened.
func loadOnce(o *Options, log logr.Logger, tracker *model.Tracker, am allocator.Observer, pm *metrics.Proxy) error {
	a, err := newAssigner(o, log, am)
	if err != nil {
		return err
	}
	res, err := newPipelineWith(o, log, a, tracker, pm, nil).Load()
	if err != nil {
		return fmt.Errorf("nothing applied, the kernel is unchanged: %w", err)
	}
	// A file that cannot be used is not "no objects": applying the rest would delete its
	// Services from the kernel. The daemon would serve its last good state; a single run has
	// none to trust, so it changes nothing.
	if bad := manifest.BadFiles(res.FileErrors); len(bad) > 0 {
		errs := make([]error, len(bad))
		for i, e := range bad {
			errs[i] = e
		}
		return fmt.Errorf("nothing applied, the kernel is unchanged: %d manifest file(s) cannot be used; fix them and run again: %w", len(bad), errors.Join(errs...))
	}
	return nil
}

// nodeDrainer is a source that knows whether this node is on its way out (the Kubernetes
// source: the Node's deletionTimestamp and the cluster autoscaler's taint); /healthz fails
// meanwhile. Manifest mode has no such Node.
type nodeDrainer interface {
	NodeDraining() string
}

// shutdownGrace bounds the exit after SIGTERM: the rules stay in the kernel whatever happens,
// so a shutdown step that hangs (a socket, a listener) must not keep the process alive.
const shutdownGrace = 5 * time.Second

// boundShutdown starts a watchdog once ctx is cancelled (a signal): if the process has not
// returned within shutdownGrace, it prints every goroutine's stack (to find the culprit) and
// exits with 1. The returned func stops the watchdog on a normal return.
func boundShutdown(ctx context.Context, stderr io.Writer) func() {
	done := make(chan struct{})
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		select {
		case <-done:
		case <-time.After(shutdownGrace):
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			fmt.Fprintf(stderr, "nftproxy: shutdown took longer than %v; exiting anyway (the rules stay). Goroutines:\n%s\n", shutdownGrace, buf[:n])
			os.Exit(1)
		}
	}()
	return func() { close(done) }
}

// watchNodeAddresses feeds the node's local addresses to the tracker's node-address guard as they
// change. If they cannot be followed any more, the last ones stay in force.
// An address gained inside --service-cidr (refused at start) cannot be refused any more: it is
// logged as an error at each change while it stays: the node still answers on it (the drop of
// unallocated Service addresses skips the node's own), but a Service may never be given it.
func watchNodeAddresses(ctx context.Context, log logr.Logger, tracker *model.Tracker, serviceCIDRs prefixList, notify func()) {
	log = log.WithName("nodeaddr")
	err := nodeaddr.Watch(ctx, log, nodeaddr.Options{}, func(addrs []netip.Addr) {
		log.V(2).Info("node addresses", "local", addrs)
		if err := checkServiceCIDRs(serviceCIDRs, addrs, "gained by the kernel since the start"); err != nil {
			log.Error(err, "the node holds an address inside --service-cidr: the node keeps answering on it, but a Service the API server gives it would take traffic meant for the node; remove the address, or correct --service-cidr and restart")
		}
		tracker.SetLocalAddresses(addrs)
		notify()
	})
	if err != nil {
		log.Error(err, "the node's addresses are no longer followed; the guard keeps the last ones it read")
	}
}

// newTracker builds the daemon's model; every rejection is logged, counted in pm and recorded in
// status (each may be nil).
func newTracker(o *Options, guard model.GuardConfig, log logr.Logger, pm *metrics.Proxy, status *explain.Status, rejected func()) *model.Tracker {
	return model.NewTracker(model.TrackerConfig{
		NodeName: o.NodeName, ProxyName: o.ProxyName, Logger: log.WithName("model"), Guard: guard,
		OnRejection: func(key model.ServiceKey, r *model.Rejection) {
			if status != nil {
				status.Set(key, r)
			}
			if r == nil {
				log.Info("service accepted again", "service", key.String())
				return
			}
			if r.Partial {
				log.Info("service rejected in part: the rest is programmed", "service", key.String(), "reason", r.Reason, "message", r.Message)
			} else {
				log.Info("service rejected: not programmed", "service", key.String(), "reason", r.Reason, "message", r.Message)
			}
			if pm != nil {
				pm.Rejected(r.Reason)
			}
			rejected()
		},
	})
}

func renderCmd(args []string, stdout, stderr io.Writer) error {
	var o Options
	if err := parseFlags("render", &o, renderFlags, args, stderr); err != nil {
		return err
	}
	if o.Manifests == "" {
		return usageError{errors.New("--manifests is required")}
	}
	log := newLogger(o.Verbosity, stderr)
	o.logConfig(log)
	if err := o.resolveFromNode(context.Background(), log); err != nil {
		return err
	}
	o.warnNoClusterTraffic(log)
	builders, err := o.builders()
	if err != nil {
		return usageError{err}
	}
	guard, err := o.guard()
	if err != nil {
		return usageError{err}
	}
	m, err := renderModel(&o, builders, guard, log)
	if err != nil {
		return err
	}
	res := m.res

	var sb strings.Builder
	fmt.Fprintf(&sb, "# nftproxy %s: the ruleset for %s (node %q)\n", Version, o.Manifests, o.NodeName)
	for _, e := range res.FileErrors {
		fmt.Fprintf(&sb, "# skipped file: %s\n", oneLine(e.Error()))
	}
	for _, e := range res.Objects.Invalid {
		fmt.Fprintf(&sb, "# left out: %s\n", oneLine(e.Error()))
	}
	for _, r := range m.rejected {
		what := "rejected service"
		if r.r.Partial {
			what = "service rejected in part (the rest is programmed)"
		}
		fmt.Fprintf(&sb, "# %s %s (%s): %s\n", what, oneLine(r.key.String()), r.r.Reason, oneLine(r.r.Message))
	}
	for _, p := range res.Problems {
		fmt.Fprintf(&sb, "# node port not assigned: %s\n", oneLine(p.Error()))
	}
	if m.node == nil {
		fmt.Fprintf(&sb, "# no Node object named %q: node ports are served on no address\n", o.NodeName)
	}
	for _, rs := range m.tables {
		sb.WriteString(nft.Render(nft.Canonical(rs)))
	}
	_, err = io.WriteString(stdout, sb.String())
	return err
}

// oneLine makes s safe for one nft comment line: newlines become spaces and other
// non-printable characters are escaped (\x00), so a name from a manifest cannot end the line
// or the script that `nft -f` reads.
func oneLine(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n':
			b.WriteByte(' ')
		case unicode.IsPrint(r):
			b.WriteRune(r)
		default:
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		}
	}
	return b.String()
}
