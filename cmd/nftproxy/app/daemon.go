package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/conntrack"
	"github.com/nftproxy/nftproxy/proxy/explain"
	"github.com/nftproxy/nftproxy/proxy/health"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeaddr"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// daemon is `nftproxy run`: what it builds, phase by phase (setUp, openKernel, newSource,
// newRunner, startHealth, startSources, serve, runLoop), and what it releases on the way out
// (shutdown, in the reverse order of acquisition). Each phase uses only what the earlier ones
// set; run --once stops after setUp.
type daemon struct {
	o       *Options
	log     logr.Logger
	ctx     context.Context // ends on a stop signal
	signals *signalHandler
	stop    func() // ends signal handling and ctx

	builders []*ruleset.Builder
	guard    model.GuardConfig
	m        *daemonMetrics
	status   *explain.Status // what `nftproxy explain` reads at /rejections
	tracker  *model.Tracker
	// rescan, once the source exists, sends Events for rejections the informers did not see
	// (a Service the kernel refused); set before anything runs.
	rescan func()

	kernel  *nft.Kernel
	cleaner *conntrack.Cleaner
	src     source
	proxier *proxier.Proxier
	rc      proxier.RunConfig
	runner  *proxier.Runner
	hs      *health.State
	// refused receives the error of a --service-cidr check failed at the first sync (the
	// daemon then stops: nothing was programmed); watchErr the source's end.
	refused  chan error
	watchErr chan error

	closers []func() // released by shutdown, last first
}

// onShutdown adds f to what shutdown releases (after everything acquired later).
func (d *daemon) onShutdown(f func()) { d.closers = append(d.closers, f) }

// shutdown releases what the phases acquired, the last acquired first. The rules stay in the
// kernel.
func (d *daemon) shutdown() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
	d.closers = nil
}

// setUp resolves the options, registers the metrics and builds the model with its guards. The
// node's local addresses are known before any Service is programmed, so the guard holds from the
// first sync; the daemon then follows their changes (startSources).
func (d *daemon) setUp() error {
	o, log := d.o, d.log
	o.logConfig(log)
	if err := o.resolveFromNode(d.ctx, log); err != nil {
		return err
	}
	o.warnNoClusterTraffic(log)
	var err error
	if d.builders, err = o.builders(); err != nil {
		return usageError{err}
	}
	if d.guard, err = o.guard(); err != nil {
		return usageError{err}
	}
	if d.m, err = newDaemonMetrics(o, d.builders); err != nil {
		return err
	}
	d.status = explain.NewStatus()
	d.tracker = newTracker(o, d.guard, log, d.m.proxy, d.status, func() {
		if d.rescan != nil {
			d.rescan()
		}
	})
	localAddrs, err := nodeaddr.List(nil)
	if err != nil {
		return err
	}
	if err := checkServiceCIDRs(o.ServiceCIDRs, localAddrs, "held by the kernel in nftproxy's network namespace"); err != nil {
		return usageError{err}
	}
	d.tracker.SetLocalAddresses(localAddrs)
	return d.m.followModel(d.tracker, d.builders)
}

// openKernel opens netlink to nftables, checks that the table is ours, and opens the conntrack
// cleaner.
func (d *daemon) openKernel() error {
	kernel, err := nft.NewKernel()
	if err != nil {
		return fmt.Errorf("open netlink to nftables: %w (run as root or with CAP_NET_ADMIN)", err)
	}
	d.kernel = kernel
	d.onShutdown(func() { kernel.Close() })
	if err := checkTableOwned(d.ctx, kernel, d.o.Table); err != nil {
		return usageError{err}
	}
	cleaner, err := conntrack.New(d.log.WithName("conntrack"), conntrack.WithObserver(d.m.conntrack))
	if err != nil {
		return err
	}
	d.cleaner = cleaner
	d.onShutdown(func() { cleaner.Close() })
	return nil
}

// newSource builds the source of the model (manifests or the API server); it does not run yet.
func (d *daemon) newSource() error {
	src, err := newSource(d.o, d.log, d.m.allocator, d.m.source, d.m.proxy)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) || d.o.Manifests == "" {
			return usageError{err}
		}
		return err
	}
	if r, ok := src.(interface{ Rescan() }); ok {
		d.rescan = r.Rescan
	}
	if ms, ok := src.(*manifestSource); ok {
		ms.status = d.status
	}
	d.src = src
	return nil
}

// newRunner builds the proxier and its sync loop. The loop is ready once the source is and the
// node's addresses pass the --service-cidr check; a failed check stops the daemon (refused).
// SIGHUP asks the loop for a full resync from now on.
func (d *daemon) newRunner() {
	o := d.o
	d.proxier = proxier.New(d.tracker, d.kernel, d.builders, d.m.proxy, d.log, time.Now)
	d.proxier.SetMaxServiceCost(o.MaxServiceCost)
	d.proxier.AddHook("conntrack", conntrack.NewHook(d.cleaner))
	d.rc = o.runConfig()
	d.refused = make(chan error, 1)
	d.rc.Ready = readyAfterCIDRCheck(d.src.Ready, o.ServiceCIDRs, d.tracker.NodeAddresses, func(err error) {
		d.refused <- err
		d.stop()
	})
	d.runner = proxier.NewRunner(d.proxier, d.rc)
	d.signals.OnHangup(d.runner.SuspectDrift)
}

// startHealth builds the health state and starts the health-check node ports.
func (d *daemon) startHealth() error {
	runner, src := d.runner, d.src
	d.hs = &health.State{
		LastSuccess:  func() time.Time { return runner.Status().LastSuccess },
		FailingSince: func() time.Time { return runner.Status().FailingSince },
		PendingSince: d.tracker.PendingSince,
		Progress:     func() time.Time { return runner.Status().Progress },
		Ready:        src.Ready,
		Timeout:      d.o.HealthzTimeout,
		// Below the shipped readiness probe's timeoutSeconds (deploy/daemonset.yaml).
		StartWait: healthzStartWait,
		// Reported (body, nftproxy_source_up, log), never a 503: the rules keep serving, and
		// load balancers must not drop every node because the control plane is away.
		SourceFailingSince: src.FailingSince,
		Now:                time.Now,
		Served:             d.m.proxy.Served,
	}
	if nd, ok := src.(nodeDrainer); ok {
		d.hs.NodeDraining = nd.NodeDraining
	}
	if err := d.m.followHealth(d.hs, d.o.Manifests != ""); err != nil {
		return err
	}
	if d.o.HealthCheckPort == 0 {
		d.log.Info("health-check node ports not served (--health-check-port 0)")
		return nil
	}
	// Health-check node ports follow the rules' state only (hs.Healthy). The listener opens
	// before the first sync: a probe redirected by rules a previous run left waits in its
	// backlog for the first sync's state instead of being refused.
	hc := health.NewCheckServer(health.CheckConfig{NodeName: d.o.NodeName, Port: uint16(d.o.HealthCheckPort), Healthy: d.hs.Healthy,
		Observer: d.m.healthCheck, Log: d.log.WithName("healthcheck")})
	if err := hc.Listen(); err != nil {
		go func() { _ = hc.Run(d.ctx) }() // logs, and retries until the port is free
	}
	d.onShutdown(func() {
		// The redirect goes before the listener: from then on a probe reaches whoever holds
		// the node port (kube-proxy started beside nftproxy in a rollback) or, as without
		// nftproxy, nobody; connections already redirected are served meanwhile.
		if d.withdrawHealthChecks() {
			time.Sleep(healthCheckDrain)
		}
		_ = hc.Close()
	})
	d.proxier.AddHook("health-check node ports", hc)
	return nil
}

// healthCheckDrain is how long the health-check listener keeps answering after the redirect to
// it was withdrawn: a connection redirected just before completes its handshake within a
// round trip.
const healthCheckDrain = time.Second

// healthzStartWait is how long /healthz waits for the first sync before answering 503: long
// enough for a first sync on a busy node, shorter than the shipped readiness probe's
// timeoutSeconds (5), so the kubelet's first probes wait for the sync instead of failing.
const healthzStartWait = 4 * time.Second

// withdrawHealthChecks empties the health-check node-port set of each table, so that nothing is
// redirected to the listener that is about to close (the node's own probes are redirected
// whoever holds the port: the socket check only serves traffic from outside). The set's rules
// stay, like every other rule. It reports whether any set was emptied.
func (d *daemon) withdrawHealthChecks() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	emptied := false
	for _, b := range d.builders {
		tx := nft.NewTransaction(b.Table())
		tx.Flush(&nft.Set{Name: ruleset.SetHealthCheckPorts})
		_, err := d.kernel.Apply(ctx, tx)
		switch {
		case err == nil:
			emptied = true
		case nft.IsNotFound(err): // never synced: nothing redirects here
		default:
			d.log.Error(err, "cannot withdraw the redirect of health-check node ports; the node's own probes of them are refused until nftproxy runs again or nftproxy cleanup removes its tables", "table", b.Table().String())
		}
	}
	return emptied
}

// startSources starts what feeds the sync loop: nftables events (drift), the source, the node's
// addresses, and the check of the node's ephemeral ports.
func (d *daemon) startSources() error {
	ctx, o, log := d.ctx, d.o, d.log
	if o.DriftEvents {
		d.onShutdown(watchDrift(ctx, log, d.kernel, d.builders, d.runner, d.m.drift, d.rc.FullSyncPeriod))
	}
	d.watchErr = make(chan error, 1)
	notify := queuing(d.m.proxy, d.tracker, d.runner.Notify)
	go func() { d.watchErr <- d.src.Run(ctx, d.tracker, notify) }()
	go watchNodeAddresses(ctx, log, d.tracker, o.ServiceCIDRs, notify)
	return watchLocalPorts(ctx, o, log, d.tracker, d.m.localPorts)
}

// serve starts the health and metrics servers.
func (d *daemon) serve() error {
	servers, err := serve(d.ctx, d.log, d.o, d.hs, d.m.reg, d.status)
	if err != nil {
		return err
	}
	d.onShutdown(servers)
	return nil
}

// runLoop runs the sync loop until a stop signal, the source's failure, or a --service-cidr
// check failed at the first sync.
func (d *daemon) runLoop() error {
	d.log.Info("nftproxy running", "version", Version, "manifests", d.o.Manifests, "node", d.o.NodeName, "families", d.o.Families)
	done := make(chan struct{})
	go func() { d.runner.Run(d.ctx); close(done) }()
	select {
	case <-d.ctx.Done():
	case err := <-d.watchErr:
		if err != nil && d.ctx.Err() == nil {
			d.stop()
			<-done
			return fmt.Errorf("source %s: %w", d.src, err)
		}
	}
	<-done
	select {
	case err := <-d.refused:
		return usageError{fmt.Errorf("nothing programmed: %w", err)}
	default:
	}
	d.log.Info("nftproxy stopped; the rules stay in the kernel (nftproxy cleanup removes them)")
	return nil
}

// run is the daemon after setUp: every phase in order, then the loop.
func (d *daemon) run() error {
	if err := d.openKernel(); err != nil {
		return err
	}
	if err := d.newSource(); err != nil {
		return err
	}
	d.newRunner()
	if err := d.startHealth(); err != nil {
		return err
	}
	if err := d.startSources(); err != nil {
		return err
	}
	if err := d.serve(); err != nil {
		return err
	}
	return d.runLoop()
}
