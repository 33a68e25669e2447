package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/conntrack"
	"github.com/nftproxy/nftproxy/proxy/health"
	"github.com/nftproxy/nftproxy/proxy/healthcheck"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
)

func runCmd(args []string, stdout, stderr io.Writer) error {
	var o Options
	if err := parseFlags("run", &o, true, args, stderr); err != nil {
		return err
	}
	builders, err := o.builders()
	if err != nil {
		return usageError{err}
	}
	log := newLogger(o.Verbosity, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer boundShutdown(ctx, stderr)()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pm, err := metrics.NewProxy(reg, model.AllReasons())
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	am, err := metrics.NewAllocatorMetrics(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	tracker := newTracker(&o, log, pm)
	if err := pm.WatchPending(tracker.Pending); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}

	kernel, err := nft.NewKernel()
	if err != nil {
		return fmt.Errorf("open netlink to nftables: %w (run as root or with CAP_NET_ADMIN)", err)
	}
	defer kernel.Close()
	ctm, err := metrics.NewConntrack(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	hcm, err := metrics.NewHealthCheck(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	cleaner, err := conntrack.New(log.WithName("conntrack"), conntrack.WithObserver(ctm))
	if err != nil {
		return err
	}
	defer cleaner.Close()
	opts := proxier.Options{Conntrack: cleaner, NodeName: o.NodeName}

	if o.Once {
		p := proxier.New(tracker, kernel, builders, pm, log, time.Now, opts)
		if o.Manifests == "" {
			return usageError{errors.New("--once needs --manifests: the directory of Service, EndpointSlice and Node manifests to apply")}
		}
		a, err := newAssigner(&o, log, am)
		if err != nil {
			return err
		}
		objs, ferrs := manifest.Load(o.Manifests)
		reportFileErrors(log, ferrs)
		assign(a, log, &objs, ferrs)
		manifest.NewFeeder(tracker).Feed(objs, ferrs)
		warnNoNode(log, tracker, o.NodeName)
		res, err := p.Sync(ctx, true)
		if err != nil {
			return err
		}
		log.Info("applied", "ops", res.Ops, "repairs", res.Repairs, "bytes", res.Stats.Bytes, "kernelTime", res.Stats.Duration)
		return nil
	}

	src, err := newSource(&o, log, am)
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) || o.Manifests == "" {
			return usageError{err}
		}
		return err
	}
	// The health state reads the runner, which needs the proxier, which needs the health-check
	// server, which asks the health state: the runner is assigned before anything runs.
	var runner *proxier.Runner
	hs := &health.State{
		LastSuccess:  func() time.Time { return runner.Status().LastSuccess },
		FailingSince: func() time.Time { return runner.Status().FailingSince },
		PendingSince: tracker.PendingSince,
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
	if err := metrics.WatchHealth(reg, hs.SourceUp, hs.NodeEligible); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	// Health-check node ports follow the rules' state only (hs.Healthy), on the
	// --nodeport-addresses only, as kube-proxy's.
	hc := healthcheck.New(healthcheck.Config{Healthy: hs.Healthy, NodePortCIDRs: o.NodePortCIDRs, Observer: hcm, Log: log.WithName("healthcheck")})
	defer hc.Close()
	opts.HealthCheck = hc
	p := proxier.New(tracker, kernel, builders, pm, log, time.Now, opts)
	rc := o.runConfig()
	rc.Ready = src.Ready
	runner = proxier.NewRunner(p, rc)
	dm, err := metrics.NewDrift(reg)
	if err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}
	if o.DriftEvents {
		defer watchDrift(ctx, log, kernel, builders, runner, dm, rc.FullSyncPeriod)()
	}
	watchErr := make(chan error, 1)
	go func() { watchErr <- src.Run(ctx, tracker, runner.Notify) }()

	servers, err := serve(log, &o, hs, reg)
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
	log.Info("nftproxy stopped; the rules stay in the kernel (nftproxy cleanup removes them)")
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

func newTracker(o *Options, log logr.Logger, pm *metrics.Proxy) *model.Tracker {
	return model.NewTracker(model.TrackerConfig{
		NodeName: o.NodeName, ProxyName: o.ProxyName, Logger: log.WithName("model"),
		OnRejection: func(key model.ServiceKey, r *model.Rejection) {
			if r == nil {
				log.Info("service accepted again", "service", key.String())
				return
			}
			log.Info("service rejected: not programmed", "service", key.String(), "reason", r.Reason, "message", r.Message)
			if pm != nil {
				pm.Rejected(r.Reason)
			}
		},
	})
}

func reportFileErrors(log logr.Logger, ferrs []manifest.FileError) {
	for _, e := range ferrs {
		log.Error(e, "manifest skipped; the objects of other files are still served")
	}
}

func warnNoNode(log logr.Logger, tr *model.Tracker, name string) {
	if tr.Snapshot().Node == nil {
		log.Info("no Node object for this node in the manifests: node ports are not served until one appears", "node", name)
	}
}

// serve starts the health and metrics listeners; the returned function stops them.
func serve(log logr.Logger, o *Options, hs *health.State, reg *prometheus.Registry) (func(), error) {
	var srvs []*http.Server
	start := func(addr string, h http.Handler, what string) error {
		if addr == "" {
			return nil
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen for %s on %s: %w (change the address flag, or set it empty to disable)", what, addr, err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		srvs = append(srvs, srv)
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "server stopped", "what", what, "address", addr)
			}
		}()
		return nil
	}
	stopAll := func() {
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, s := range srvs {
			_ = s.Shutdown(c)
		}
	}
	hmux := http.NewServeMux()
	hs.Register(hmux)
	mmux := http.NewServeMux()
	mmux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if o.HealthzAddress != "" && o.HealthzAddress == o.MetricsAddress {
		hmux.Handle("/metrics", mmux)
		if err := start(o.HealthzAddress, hmux, "health and metrics"); err != nil {
			return nil, err
		}
		return stopAll, nil
	}
	if err := start(o.HealthzAddress, hmux, "health"); err != nil {
		return nil, err
	}
	if err := start(o.MetricsAddress, mmux, "metrics"); err != nil {
		stopAll()
		return nil, err
	}

	return stopAll, nil
}

func renderCmd(args []string, stdout, stderr io.Writer) error {
	var o Options
	if err := parseFlags("render", &o, false, args, stderr); err != nil {
		return err
	}
	if o.Manifests == "" {
		return usageError{errors.New("--manifests is required")}
	}
	builders, err := o.builders()
	if err != nil {
		return usageError{err}
	}
	log := newLogger(o.Verbosity, stderr)
	type rej struct {
		key model.ServiceKey
		r   *model.Rejection
	}
	var rejected []rej
	tracker := model.NewTracker(model.TrackerConfig{NodeName: o.NodeName, ProxyName: o.ProxyName, Logger: log,
		OnRejection: func(k model.ServiceKey, r *model.Rejection) {
			if r != nil {
				rejected = append(rejected, rej{k, r})
			}
		}})
	a, err := newAssigner(&o, log, nil)
	if err != nil {
		return err
	}
	objs, ferrs := manifest.Load(o.Manifests)
	probs, _ := a.Assign(&objs, ferrs)
	manifest.NewFeeder(tracker).Feed(objs, ferrs)
	snap := tracker.Snapshot()

	var sb strings.Builder
	fmt.Fprintf(&sb, "# nftproxy %s: the ruleset for %s (node %q)\n", Version, o.Manifests, o.NodeName)
	for _, e := range ferrs {
		fmt.Fprintf(&sb, "# skipped file: %s\n", oneLine(e.Error()))
	}
	sort.Slice(rejected, func(i, j int) bool { return rejected[i].key.String() < rejected[j].key.String() })
	for _, r := range rejected {
		fmt.Fprintf(&sb, "# rejected service %s (%s): %s\n", r.key, r.r.Reason, oneLine(r.r.Message))
	}
	for _, p := range probs {
		fmt.Fprintf(&sb, "# node port not assigned: %s\n", oneLine(p.Error()))
	}
	if snap.Node == nil {
		fmt.Fprintf(&sb, "# no Node object named %q: node ports are served on no address\n", o.NodeName)
	}
	for _, b := range builders {
		rs := b.Ruleset(snap.Node, snap.Sorted())
		sb.WriteString(nft.Render(nft.Canonical(rs)))
	}
	_, err = io.WriteString(stdout, sb.String())
	return err
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
