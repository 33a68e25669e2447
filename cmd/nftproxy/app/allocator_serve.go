package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nftproxy/nftproxy/metrics"
)

// Default listen addresses of `nftproxy allocator`. The pods use the host network, so these
// are node ports: 10251 and 10252 lie in the proxies' default --reserved-ports (no Service can
// capture them on a node address) and are free since kube-scheduler and kube-controller-manager
// dropped their insecure ports (Kubernetes 1.23).
const (
	DefaultAllocatorHealthzAddress = "0.0.0.0:10251"
	DefaultAllocatorMetricsAddress = "127.0.0.1:10252"
)

// electionState is what the allocator's probes read (controller.Controller implements it).
type electionState interface {
	// Leader is the Lease's holder as last seen; false until the Lease was read once.
	Leader() (string, bool)
	IsLeader() bool
	// Alive fails only for a replica stuck leading past its Lease.
	Alive() error
}

// allocatorMux serves /livez (liveness: not stuck holding an expired Lease), /healthz
// (readiness: the replica has read the Lease and knows the leader; an API server lost later
// does not fail it, the replica then simply waits) and, when withMetrics, /metrics.
func allocatorMux(st electionState, reg *prometheus.Registry, withHealth, withMetrics bool) *http.ServeMux {
	mux := http.NewServeMux()
	if withHealth {
		mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
			if err := st.Alive(); err != nil {
				http.Error(w, "stuck: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			id, ok := st.Leader()
			body := struct {
				Leader   string `json:"leader,omitempty"`
				IsLeader bool   `json:"isLeader"`
				Message  string `json:"message,omitempty"`
			}{Leader: id, IsLeader: st.IsLeader()}
			code := http.StatusOK
			if !ok {
				code = http.StatusServiceUnavailable
				body.Message = "the leader-election Lease has not been read yet: is the API server reachable, and may this ServiceAccount get the Lease?"
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(body)
		})
	}
	if withMetrics {
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	}
	return mux
}

// allocatorRegistry holds the allocator's metrics: the leader gauge, the allocator's numbers
// (obs, passed to the controller) and the Go and process collectors.
func allocatorRegistry(isLeader func() bool) (*prometheus.Registry, *metrics.AllocatorMetrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	am, err := metrics.NewAllocatorMetrics(reg)
	if err != nil {
		return nil, nil, fmt.Errorf("register metrics: %w", err)
	}
	if err := metrics.WatchLeader(reg, isLeader); err != nil {
		return nil, nil, fmt.Errorf("register metrics: %w", err)
	}
	return reg, am, nil
}

// allocatorListenRetry is how often `nftproxy allocator` tries a port in use again.
const allocatorListenRetry = 5 * time.Second

// serveAllocator opens the health and metrics listeners (one when the addresses are equal, none
// for an empty address) and returns the addresses bound at once (for ":0") and a function that
// stops the servers. A port in use is logged and tried again every retry, not fatal: the pods use the host
// network and two replicas may share a node (one-node clusters; the anti-affinity is only
// preferred, since a required one would block a rollout there). Until the first replica leaves,
// the second's probes reach the first's listener, which answers for a live replica too.
func serveAllocator(log logr.Logger, healthzAddr, metricsAddr string, retry time.Duration, st electionState, reg *prometheus.Registry) ([]net.Addr, func(), error) {
	type listener struct {
		addr          string
		health, metrs bool
	}
	var want []listener
	if healthzAddr != "" && healthzAddr == metricsAddr {
		want = append(want, listener{healthzAddr, true, true})
	} else {
		if healthzAddr != "" {
			want = append(want, listener{healthzAddr, true, false})
		}
		if metricsAddr != "" {
			want = append(want, listener{metricsAddr, false, true})
		}
	}
	var (
		mu    sync.Mutex
		srvs  []*http.Server
		addrs []net.Addr
		done  = make(chan struct{})
	)
	stop := func() {
		mu.Lock()
		select {
		case <-done:
		default:
			close(done)
		}
		all := slices.Clone(srvs)
		mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, s := range all {
			_ = s.Shutdown(ctx)
		}
	}
	serve := func(l listener, ln net.Listener) {
		srv := &http.Server{Handler: allocatorMux(st, reg, l.health, l.metrs), ReadHeaderTimeout: 5 * time.Second}
		mu.Lock()
		select {
		case <-done:
			mu.Unlock()
			ln.Close()
			return
		default:
		}
		srvs = append(srvs, srv)
		mu.Unlock()
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error(err, "HTTP server stopped", "address", l.addr)
			}
		}()
	}
	for _, l := range want {
		ln, err := net.Listen("tcp", l.addr)
		if err == nil {
			addrs = append(addrs, ln.Addr())
			serve(l, ln)
			continue
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			stop()
			return nil, nil, fmt.Errorf("listen on %s: %w (change --healthz-bind-address or --metrics-bind-address, or set it empty to disable)", l.addr, err)
		}
		log.Error(err, "Port in use, trying again (another replica on this node?)", "address", l.addr, "every", retry)
		go func() {
			t := time.NewTicker(retry)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
				}
				if ln, err := net.Listen("tcp", l.addr); err == nil {
					log.Info("Listening now", "address", l.addr)
					serve(l, ln)
					return
				}
			}
		}()
	}
	return addrs, stop, nil
}
