package health

// This file serves the health-check node ports of externalTrafficPolicy=Local Services, as
// kube-proxy does: an external load balancer probes each node on the Service's
// healthCheckNodePort and sends traffic only to nodes that answer 200, i.e. nodes with a ready
// local endpoint. Every request, whatever its path, gets 200 when the node has local endpoints
// and the proxy is healthy, 503 otherwise, with a JSON body naming the Service and the count,
// and the count again in X-Load-Balancing-Endpoint-Weight (used by weighted load balancers).
// Their verdict includes the proxy's own (State.Healthy, healthz.go).
//
// nftproxy never binds the node ports themselves: it listens on one port of its own
// (--health-check-port) and its rules redirect each health-check node port there, unless
// another process (kube-proxy, in a handover) holds it (proxy/ruleset/README.md, "Health-check
// node ports"). So neither proxy keeps the other from its ports, and no port goes dark while
// one stops and the other takes over. The listener finds the Service from the connection's
// original destination port (OriginalDst).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
)

// Check is what one Service's health check needs (ChecksFromSnapshot builds them).
type Check struct {
	// Port is the Service's healthCheckNodePort (0: none, nothing is served).
	Port uint16
	// LocalEndpoints is the number of ready endpoints on this node.
	LocalEndpoints int
}

// CheckObserver receives what the CheckServer reports; metrics.HealthCheck implements it.
type CheckObserver interface {
	// ListenFailed reports that the listener could not be opened (its port is taken).
	ListenFailed(port uint16, err error)
	// Listeners reports, after an Update, how many Services' health-check node ports are
	// served (the listener is open) and how many are not (it is not).
	Listeners(serving, failed int)
}

// CheckConfig configures a CheckServer.
type CheckConfig struct {
	// NodeName selects the local endpoints counted after each sync (AfterCommit).
	NodeName string
	// Port is the listener's port (--health-check-port), where the rules redirect the
	// health-check node ports.
	Port uint16
	// Host is the address the listener binds; "" is the wildcard address, which the daemon
	// uses: a redirect rewrites the destination to the incoming interface's first address (or
	// loopback), not to the node-port address the probe named. The rules, not the listener,
	// restrict which addresses (--nodeport-addresses) are served.
	Host string
	// Healthy reports whether the proxy's rules are current (sync staleness, kube-proxy's
	// IsHealthy). While it is false every Service answers 503, so load balancers move away from
	// a node whose rules may be stale. It does not follow the API server's reachability (an
	// unreachable control plane must not drain every node at once) nor the node's deletion (a
	// draining node's local endpoints go away by themselves). Nil: always healthy.
	Healthy func() bool
	// RetryInterval is how often Run tries again to open the listener when its port was taken.
	// Zero: DefaultRetryInterval.
	RetryInterval time.Duration
	// Observer, when set, receives listen failures and served counts.
	Observer CheckObserver
	// OriginalDst returns where a connection was sent before NAT; nil: OriginalDst
	// (SO_ORIGINAL_DST). Tests replace it.
	OriginalDst func(net.Conn) (netip.AddrPort, error)
	// UnknownPortWait bounds how long a connection redirected for a port no Service has waits
	// for an Update that knows it (the rules of a new Service commit before the sync's
	// AfterCommit); it is then answered 503. Zero: DefaultUnknownPortWait.
	UnknownPortWait time.Duration
	Log             logr.Logger
}

// CheckServer answers the health-check node ports on one listener. Until its first Update (the
// first complete state of the model, after the first sync) it accepts nothing: redirected
// connections wait in the listen backlog rather than get an answer from an empty model. Its
// methods are safe for concurrent use.
type CheckServer struct {
	cfg CheckConfig

	open sync.Mutex // one Listen or Close at a time
	ln   net.Listener
	srv  *http.Server
	done chan struct{} // closed when Serve returns

	mu     sync.Mutex // guards the fields below, held briefly (handlers read counts)
	byPort map[uint16]served
	count  int           // Services with a port, for the Observer
	ready  chan struct{} // closed by the first Update
	gen    chan struct{} // closed and replaced by every Update (a handler waiting for a port)
	closed chan struct{} // closed by Close: the gate stops waiting
}

type served struct {
	key   model.ServiceKey
	count int
}

// DefaultRetryInterval is CheckConfig.RetryInterval's default.
const DefaultRetryInterval = time.Second

// DefaultUnknownPortWait is CheckConfig.UnknownPortWait's default.
const DefaultUnknownPortWait = 2 * time.Second

// NewCheckServer returns a CheckServer, not listening yet (Listen, Run).
func NewCheckServer(cfg CheckConfig) *CheckServer {
	if cfg.OriginalDst == nil {
		cfg.OriginalDst = OriginalDst
	}
	if cfg.UnknownPortWait <= 0 {
		cfg.UnknownPortWait = DefaultUnknownPortWait
	}
	return &CheckServer{cfg: cfg, byPort: map[uint16]served{}, ready: make(chan struct{}), gen: make(chan struct{}), closed: make(chan struct{})}
}

var _ proxier.Hook = (*CheckServer)(nil)

// AfterCommit serves the health checks the model asks for once a sync has committed its rules
// (a proxier.Hook), so counts change after the rules that serve them.
func (s *CheckServer) AfterCommit(_ context.Context, c *proxier.Commit) error {
	return s.Update(ChecksFromSnapshot(c.Snapshot(), s.cfg.NodeName))
}

// Update makes the served Services exactly svcs and sets their local endpoint counts; the
// first Update lets the waiting connections in. Two Services with one port (only hand-written
// manifests can do that) answer as the first by name, and the other is logged.
func (s *CheckServer) Update(svcs map[model.ServiceKey]Check) error {
	keys := make([]model.ServiceKey, 0, len(svcs))
	for k, c := range svcs {
		if c.Port != 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	byPort := make(map[uint16]served, len(keys))
	var errs []error
	for _, k := range keys {
		c := svcs[k]
		if other, dup := byPort[c.Port]; dup {
			errs = append(errs, fmt.Errorf("health check for Service %s: port %d is Service %s's too; only %s is answered (give each Service its own spec.healthCheckNodePort)",
				k, c.Port, other.key, other.key))
			continue
		}
		byPort[c.Port] = served{key: k, count: c.LocalEndpoints}
	}
	s.mu.Lock()
	s.byPort, s.count = byPort, len(keys)
	select {
	case <-s.ready:
	default:
		close(s.ready)
	}
	close(s.gen)
	s.gen = make(chan struct{})
	s.mu.Unlock()
	s.report()
	err := errors.Join(errs...)
	if err != nil {
		s.cfg.Log.Error(err, "health-check node ports")
	}
	return err
}

// report tells the Observer how many Services are served.
func (s *CheckServer) report() {
	if s.cfg.Observer == nil {
		return
	}
	s.open.Lock()
	listening := s.ln != nil
	s.open.Unlock()
	s.mu.Lock()
	n := s.count
	s.mu.Unlock()
	if listening {
		s.cfg.Observer.Listeners(n, 0)
	} else {
		s.cfg.Observer.Listeners(0, n)
	}
}

// Listen opens the listener if it is not open. The daemon calls it before the first sync, so
// that the first redirected probe finds it; a taken port is reported (the error, the log, the
// Observer) and Run tries again.
func (s *CheckServer) Listen() error {
	if err := s.listen(); err != nil {
		return err
	}
	s.report()
	return nil
}

// listen is Listen without the report.
func (s *CheckServer) listen() error {
	s.open.Lock()
	defer s.open.Unlock()
	if s.ln != nil {
		return nil
	}
	select {
	case <-s.closed:
		return errors.New("health-check listener: closed")
	default:
	}
	addr := net.JoinHostPort(s.cfg.Host, strconv.Itoa(int(s.cfg.Port)))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		err = fmt.Errorf("health-check listener: listen on %s: %w (another process holds the port: free it or change --health-check-port; until then no health-check node port is answered unless kube-proxy holds it)", addr, err)
		if s.cfg.Observer != nil {
			s.cfg.Observer.ListenFailed(s.cfg.Port, err)
		}
		return err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }}
	s.ln, s.srv, s.done = ln, srv, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		_ = srv.Serve(&gatedListener{Listener: ln, s: s}) // returns http.ErrServerClosed on Close
	}(s.done)
	s.cfg.Log.V(1).Info("health-check listener open", "address", ln.Addr().String())
	return nil
}

// Addr is the listener's address (nil while it is not open).
func (s *CheckServer) Addr() net.Addr {
	s.open.Lock()
	defer s.open.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// closeTimeout bounds how long Close waits for requests in progress.
const closeTimeout = 5 * time.Second

// Close closes the listener, lets the requests in progress finish (for at most 5 s) and
// returns; connections still waiting in its backlog are refused. The CheckServer cannot listen
// again. The daemon first takes the redirect away, so that no new connection comes here.
func (s *CheckServer) Close() error {
	s.open.Lock()
	defer s.open.Unlock()
	s.mu.Lock()
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	s.mu.Unlock()
	if s.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	<-s.done
	s.ln, s.srv = nil, nil
	return err
}

func (s *CheckServer) retryInterval() time.Duration {
	if s.cfg.RetryInterval <= 0 {
		return DefaultRetryInterval
	}
	return s.cfg.RetryInterval
}

// Run opens the listener, trying again every RetryInterval while its port is taken (logged
// once per outage), until it is open or ctx ends. It does not close it: the daemon does, after
// taking the redirect away (Close).
func (s *CheckServer) Run(ctx context.Context) error {
	err := s.Listen()
	if err == nil {
		return nil
	}
	s.cfg.Log.Error(err, "cannot open the health-check listener, retrying every "+s.retryInterval().String())
	tick := time.NewTicker(s.retryInterval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return err
		case <-tick.C:
			if err = s.Listen(); err == nil {
				s.cfg.Log.Info("health-check listener open after its port was freed", "port", s.cfg.Port)
				return nil
			}
		}
	}
}

// gatedListener accepts nothing before the CheckServer's first Update: until then connections
// wait in the kernel's backlog (the client sees a slow answer, never a wrong one).
type gatedListener struct {
	net.Listener
	s *CheckServer
}

func (g *gatedListener) Accept() (net.Conn, error) {
	select {
	case <-g.s.ready:
	case <-g.s.closed:
		return nil, net.ErrClosed
	}
	return g.Listener.Accept()
}

type connKey struct{}

// checkBody is the JSON kube-proxy answers with.
type checkBody struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

// ServeHTTP answers for the Service whose health-check node port the connection was sent to.
func (s *CheckServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if c == nil {
		http.Error(w, "health check: no connection", http.StatusInternalServerError)
		return
	}
	dst, err := s.cfg.OriginalDst(c)
	if err != nil {
		s.cfg.Log.V(1).Info("health check: no original destination", "client", c.RemoteAddr().String(), "error", err.Error())
		http.Error(w, "health check: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	svc, ok := s.lookup(r.Context(), dst.Port())
	if !ok {
		http.Error(w, fmt.Sprintf("no Service has health-check node port %d on this node", dst.Port()), http.StatusServiceUnavailable)
		return
	}
	healthy := s.cfg.Healthy == nil || s.cfg.Healthy()

	var b checkBody
	b.Service.Namespace, b.Service.Name = svc.key.Namespace, svc.key.Name
	b.LocalEndpoints, b.ServiceProxyHealthy = svc.count, healthy
	out, _ := json.MarshalIndent(b, "", "\t") // cannot fail: plain strings, ints and bools

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(svc.count))
	if svc.count > 0 && healthy {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(out)
}

// lookup finds port's Service; a port not known yet is waited for until an Update knows it
// (a new Service's rules commit before the sync's AfterCommit), for at most UnknownPortWait.
func (s *CheckServer) lookup(ctx context.Context, port uint16) (served, bool) {
	deadline := time.NewTimer(s.cfg.UnknownPortWait)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		svc, ok := s.byPort[port]
		gen := s.gen
		s.mu.Unlock()
		if ok {
			return svc, true
		}
		select {
		case <-gen:
		case <-deadline.C:
			return served{}, false
		case <-ctx.Done():
			return served{}, false
		}
	}
}

// ChecksFromSnapshot returns the health checks the model asks for on node nodeName: one per Service
// with externalTrafficPolicy Local and a health-check node port, counting the distinct ready
// endpoints on this node over all the Service's ports (terminating endpoints do not count, so a
// node whose pods are all shutting down is drained, as upstream does). A dual-stack pod has an
// endpoint in each family; the count is that of the family with more, i.e. the number of pods.
func ChecksFromSnapshot(snap model.Snapshot, nodeName string) map[model.ServiceKey]Check {
	out := map[model.ServiceKey]Check{}
	for k, svc := range snap.Services {
		if svc == nil || svc.Rejected != nil {
			continue
		}
		var port uint16
		local4, local6 := map[netip.Addr]struct{}{}, map[netip.Addr]struct{}{}
		for i := range svc.Ports {
			sp := &svc.Ports[i]
			if !sp.ExternalTrafficLocal || sp.HealthCheckNodePort == 0 {
				continue
			}
			port = sp.HealthCheckNodePort
			for _, ep := range sp.Endpoints {
				if !ep.Ready || ep.Terminating || nodeName == "" || ep.NodeName() != nodeName {
					continue
				}
				if ep.Addr.Unmap().Is4() {
					local4[ep.Addr.Unmap()] = struct{}{}
				} else {
					local6[ep.Addr] = struct{}{}
				}
			}
		}
		if port != 0 {
			out[k] = Check{Port: port, LocalEndpoints: max(len(local4), len(local6))}
		}
	}
	return out
}
