package health

// This file serves the health-check node ports of externalTrafficPolicy=Local Services, as
// kube-proxy does: an external load balancer probes each node on the Service's
// healthCheckNodePort and sends traffic only to nodes that answer 200, i.e. nodes with a ready
// local endpoint. Every request on the port, whatever its path, gets 200 when the node has local
// endpoints and the proxy is healthy, 503 otherwise, with a JSON body naming the Service and
// the count, and the count again in X-Load-Balancing-Endpoint-Weight (used by weighted load
// balancers). Their verdict includes the proxy's own (State.Healthy, healthz.go).

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
	// ListenFailed reports a health-check port that could not be opened.
	ListenFailed(port uint16, err error)
	// Listeners reports how many Services' ports are served and how many failed, after an Update.
	Listeners(serving, failed int)
}

// CheckConfig configures a CheckServer.
type CheckConfig struct {
	// NodeName selects the local endpoints counted after each sync (AfterCommit).
	NodeName string
	// Addresses, when set, are the exact addresses each port is opened on.
	Addresses []netip.Addr
	// NodePortCIDRs (--nodeport-addresses), when Addresses is empty: each port is opened on every
	// address of the node inside them, as kube-proxy does, and nowhere else; the node's
	// addresses are read when a port is opened. Both empty: one wildcard listener per port.
	NodePortCIDRs []netip.Prefix
	// LocalAddrs lists the node's addresses for NodePortCIDRs; nil reads the interfaces
	// (net.InterfaceAddrs). Tests replace it.
	LocalAddrs func() ([]netip.Addr, error)
	// Healthy reports whether the proxy's rules are current (sync staleness, kube-proxy's
	// IsHealthy). While it is false every Service answers 503, so load balancers move away from
	// a node whose rules may be stale. It does not follow the API server's reachability (an
	// unreachable control plane must not drain every node at once) nor the node's deletion (a
	// draining node's local endpoints go away by themselves). Nil: always healthy.
	Healthy func() bool
	// RetryInterval is how often Run tries again to open the ports that could not be opened
	// (held by another process: kube-proxy's listener during a migration, until it exits).
	// Zero: DefaultRetryInterval.
	RetryInterval time.Duration
	// Observer, when set, receives bind failures and listener counts.
	Observer CheckObserver
	Log      logr.Logger
}

// CheckServer serves the health-check node ports: one listener set per Service that has one.
// Its methods are safe for concurrent use.
type CheckServer struct {
	cfg CheckConfig

	update   sync.Mutex // one Update (listen and close) at a time
	mu       sync.Mutex // guards services and their fields, held briefly (handlers read counts)
	services map[model.ServiceKey]*service
}

type service struct {
	key     model.ServiceKey
	port    uint16
	count   int
	servers []*http.Server
	addrs   []net.Addr
	failed  error
	done    sync.WaitGroup
}

// DefaultRetryInterval is CheckConfig.RetryInterval's default: a port another process held is
// served within a second of its release.
const DefaultRetryInterval = time.Second

// NewCheckServer returns a CheckServer with no ports open.
func NewCheckServer(cfg CheckConfig) *CheckServer {
	return &CheckServer{cfg: cfg, services: map[model.ServiceKey]*service{}}
}

var _ proxier.Hook = (*CheckServer)(nil)

// AfterCommit serves the health checks the model asks for once a sync has committed its rules
// (a proxier.Hook), so ports open and counts change after the rules that serve them.
func (s *CheckServer) AfterCommit(_ context.Context, c *proxier.Commit) error {
	return s.Update(ChecksFromSnapshot(c.Snapshot(), s.cfg.NodeName))
}

// Update makes the served Services exactly svcs: it opens the ports of new Services, moves
// changed ports, closes the ports of Services that are gone, and sets every local endpoint count.
// A port that cannot be opened is reported (the returned error, the log, the Observer) and
// retried on the next Update or Retry; the other Services are served regardless.
func (s *CheckServer) Update(svcs map[model.ServiceKey]Check) error {
	s.update.Lock()
	defer s.update.Unlock()
	return s.apply(svcs)
}

// Retry tries again to open the ports that could not be opened, without waiting for the next
// Update: a port held by another process is served as soon as that process lets it go.
// It does nothing when every port is open.
func (s *CheckServer) Retry() error {
	s.update.Lock()
	defer s.update.Unlock()
	s.mu.Lock()
	svcs, pending := make(map[model.ServiceKey]Check, len(s.services)), false
	for k, svc := range s.services {
		svcs[k] = Check{Port: svc.port, LocalEndpoints: svc.count}
		pending = pending || svc.servers == nil
	}
	s.mu.Unlock()
	if !pending {
		return nil
	}
	return s.apply(svcs)
}

// apply is Update with s.update held.
func (s *CheckServer) apply(svcs map[model.ServiceKey]Check) error {
	s.mu.Lock()
	var closing []*service
	for k, svc := range s.services {
		if in, ok := svcs[k]; !ok || in.Port != svc.port {
			closing = append(closing, svc)
			delete(s.services, k)
		}
	}
	s.mu.Unlock()
	// Closing first frees a port that moves from one Service to another within this update.
	for _, svc := range closing {
		svc.close()
	}

	keys := make([]model.ServiceKey, 0, len(svcs))
	for k, in := range svcs {
		if in.Port != 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })

	var errs []error
	serving, failed := 0, 0
	for _, k := range keys {
		in := svcs[k]
		s.mu.Lock()
		svc := s.services[k]
		if svc == nil {
			svc = &service{key: k, port: in.Port}
			s.services[k] = svc
		}
		svc.count = in.LocalEndpoints
		retry, failedBefore := svc.servers == nil, svc.failed != nil
		s.mu.Unlock()
		if retry {
			if err := s.listen(svc); err != nil {
				errs = append(errs, err)
				if s.cfg.Observer != nil {
					s.cfg.Observer.ListenFailed(in.Port, err)
				}
				// Logged once per outage: Retry tries every second while another process
				// holds the port (the Observer counts every attempt).
				if !failedBefore {
					s.cfg.Log.Error(err, "cannot serve health-check node port, retrying every "+s.retryInterval().String()+"; meanwhile whoever holds it answers, or load balancers see this node as down for the Service",
						"service", k.String(), "port", in.Port)
				}
				failed++
				continue
			}
			if failedBefore {
				s.cfg.Log.Info("serving health-check node port after it was freed", "service", k.String(), "port", in.Port)
			}
		}
		serving++
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer.Listeners(serving, failed)
	}
	return errors.Join(errs...)
}

// hosts are the addresses a port is opened on ("" is the wildcard).
func (s *CheckServer) hosts() ([]string, error) {
	addrs := s.cfg.Addresses
	if len(addrs) == 0 && len(s.cfg.NodePortCIDRs) > 0 {
		local := s.cfg.LocalAddrs
		if local == nil {
			local = interfaceAddrs
		}
		all, err := local()
		if err != nil {
			return nil, fmt.Errorf("list the node's addresses for --nodeport-addresses: %w", err)
		}
		for _, a := range all {
			for _, p := range s.cfg.NodePortCIDRs {
				if p.Contains(a) && !a.IsLinkLocalUnicast() {
					addrs = append(addrs, a)
					break
				}
			}
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("no address of this node is inside --nodeport-addresses %v", s.cfg.NodePortCIDRs)
		}
	}
	if len(addrs) == 0 {
		return []string{""}, nil
	}
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out, nil
}

// interfaceAddrs is every address of the node's interfaces.
func interfaceAddrs() ([]netip.Addr, error) {
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, ia := range ifAddrs {
		if n, ok := ia.(*net.IPNet); ok {
			if a, ok := netip.AddrFromSlice(n.IP); ok {
				out = append(out, a.Unmap())
			}
		}
	}
	return out, nil
}

// listen opens svc's port on every configured address, all or none.
func (s *CheckServer) listen(svc *service) error {
	hosts, err := s.hosts()
	if err != nil {
		s.mu.Lock()
		svc.failed = err
		s.mu.Unlock()
		return fmt.Errorf("health check for Service %s on port %d: %w", svc.key, svc.port, err)
	}
	var lns []net.Listener
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(int(svc.port))))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			s.mu.Lock()
			svc.failed = err
			s.mu.Unlock()
			return fmt.Errorf("health check for Service %s: listen on port %d: %w (another process or Service holds it; free it or change spec.healthCheckNodePort)",
				svc.key, svc.port, err)
		}
		lns = append(lns, ln)
	}
	h := &checkHandler{s: s, key: svc.key}
	s.mu.Lock()
	svc.failed = nil
	for _, ln := range lns {
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second}
		svc.servers = append(svc.servers, srv)
		svc.addrs = append(svc.addrs, ln.Addr())
		svc.done.Add(1)
		go func() {
			defer svc.done.Done()
			_ = srv.Serve(ln) // returns http.ErrServerClosed on close
		}()
	}
	s.mu.Unlock()
	s.cfg.Log.V(2).Info("serving health-check node port", "service", svc.key.String(), "port", svc.port)
	return nil
}

// close stops svc's listeners and waits for their goroutines.
func (svc *service) close() {
	for _, srv := range svc.servers {
		_ = srv.Close()
	}
	svc.done.Wait()
}

// Addrs returns the addresses the Service's health check listens on (none if it is not served
// or failed), for logs and tests.
func (s *CheckServer) Addrs(key model.ServiceKey) []net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if svc := s.services[key]; svc != nil {
		return append([]net.Addr(nil), svc.addrs...)
	}
	return nil
}

// Close closes every port. The CheckServer may be updated again afterwards.
func (s *CheckServer) Close() error {
	return s.Update(nil)
}

func (s *CheckServer) retryInterval() time.Duration {
	if s.cfg.RetryInterval <= 0 {
		return DefaultRetryInterval
	}
	return s.cfg.RetryInterval
}

// Run retries the ports that could not be opened every RetryInterval (see Retry) and closes
// every port when ctx ends, for use as one of the daemon's goroutines.
func (s *CheckServer) Run(ctx context.Context) error {
	tick := time.NewTicker(s.retryInterval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return s.Close()
		case <-tick.C:
			_ = s.Retry() // reported by the Observer and the log, as Update's
		}
	}
}

type checkHandler struct {
	s   *CheckServer
	key model.ServiceKey
}

// checkBody is the JSON kube-proxy answers with.
type checkBody struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func (h *checkHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.s.mu.Lock()
	svc := h.s.services[h.key]
	count := 0
	if svc != nil {
		count = svc.count
	}
	h.s.mu.Unlock()
	healthy := h.s.cfg.Healthy == nil || h.s.cfg.Healthy()

	var b checkBody
	b.Service.Namespace, b.Service.Name = h.key.Namespace, h.key.Name
	b.LocalEndpoints, b.ServiceProxyHealthy = count, healthy
	out, _ := json.MarshalIndent(b, "", "\t") // cannot fail: plain strings, ints and bools

	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(count))
	if count > 0 && healthy {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_, _ = w.Write(out)
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
