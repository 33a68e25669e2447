package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/proxy/explain"
	"github.com/nftproxy/nftproxy/proxy/health"
)

// listenRetry is how often a port that could not be bound is tried again (kube-proxy's period).
const listenRetry = 5 * time.Second

// serve starts the health and metrics servers; the returned function stops them. A port that
// cannot be bound (kube-proxy still on the node, another agent) is not fatal unless
// --bind-address-hard-fail: it is logged, reported as nftproxy_listener_up 0 and tried again
// every listenRetry until ctx ends, while the rules are programmed as usual (kube-proxy's
// semantics: the service proxy matters more than its own health endpoint).
func serve(ctx context.Context, log logr.Logger, o *Options, hs *health.State, reg *prometheus.Registry, status http.Handler) (func(), error) {
	lm, err := metrics.NewListeners(reg)
	if err != nil {
		return nil, fmt.Errorf("register metrics: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu   sync.Mutex
		srvs []*http.Server
		wg   sync.WaitGroup
	)
	stopAll := func() {
		cancel()
		wg.Wait()
		c, cancelShutdown := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancelShutdown()
		mu.Lock()
		defer mu.Unlock()
		for _, s := range srvs {
			_ = s.Shutdown(c)
		}
	}
	run := func(srv *http.Server, ln net.Listener, what, addr string) {
		mu.Lock()
		srvs = append(srvs, srv)
		mu.Unlock()
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "server stopped", "what", what, "address", addr)
			}
		}()
	}
	start := func(addr string, h http.Handler, what, server string) error {
		if addr == "" {
			return nil
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			lm.Up(server, true)
			run(srv, ln, what, addr)
			return nil
		}
		if o.BindAddressHardFail {
			return fmt.Errorf("listen for %s on %s: %w (--bind-address-hard-fail: change the address flag, set it empty to disable, or stop the process holding the port)", what, addr, err)
		}
		lm.Up(server, false)
		log.Error(err, "cannot listen; the rules are programmed as usual and the port is tried again every 5s (nftproxy_listener_up 0 meanwhile; --bind-address-hard-fail makes this fatal). Is kube-proxy still running on this node? Give nftproxy another address flag",
			"what", what, "address", addr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(listenRetry)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				ln, err := net.Listen("tcp", addr)
				if err != nil {
					continue
				}
				log.Info("listening now", "what", what, "address", addr)
				lm.Up(server, true)
				run(srv, ln, what, addr)
				return
			}
		}()
		return nil
	}
	hmux := http.NewServeMux()
	hs.Register(hmux)
	mmux := metricsMux(o, reg)
	mmux.Handle(explain.RejectionsPath, status)
	if o.HealthzAddress != "" && o.HealthzAddress == o.MetricsAddress {
		hmux.Handle("/metrics", mmux)
		hmux.Handle(explain.RejectionsPath, mmux)
		hmux.Handle(pprofPath, mmux)
		if err := start(o.HealthzAddress, hmux, "health and metrics", metrics.ServerHealthz); err != nil {
			stopAll()
			return nil, err
		}
		return stopAll, nil
	}
	if err := start(o.HealthzAddress, hmux, "health", metrics.ServerHealthz); err != nil {
		stopAll()
		return nil, err
	}
	if err := start(o.MetricsAddress, mmux, "metrics", metrics.ServerMetrics); err != nil {
		stopAll()
		return nil, err
	}
	return stopAll, nil
}
