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

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/conntrack"
	"github.com/nftproxy/nftproxy/proxy/explain"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeaddr"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// runCmd is `nftproxy run`: the daemon (daemon.go), or with --once a single full sync.
func runCmd(args []string, stdout, stderr io.Writer) error {
	var o Options
	if err := parseFlags("run", &o, runFlags, args, stderr); err != nil {
		return err
	}
	log := newLogger(o.Verbosity, stderr)
	ctx, signals, stop := handleSignals(log, "run")
	defer stop()
	defer boundShutdown(ctx, stderr)()
	d := &daemon{o: &o, log: log, ctx: ctx, signals: signals, stop: stop}
	defer d.shutdown()
	if err := d.setUp(); err != nil {
		return err
	}
	if o.Once {
		return runOnce(ctx, &o, log, d.tracker, d.builders, d.m.proxy, d.m.allocator)
	}
	return d.run()
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
