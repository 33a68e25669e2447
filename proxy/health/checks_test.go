package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/model"
)

var (
	web = model.ServiceKey{Namespace: "ns", Name: "web"}
	rtp = model.ServiceKey{Namespace: "ns", Name: "rtp"}
)

const loopback = "127.0.0.1"

// freePorts returns n distinct TCP ports free on loopback right now.
func freePorts(t *testing.T, n int) []uint16 {
	t.Helper()
	var out []uint16
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", loopback+":0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, uint16(ln.Addr().(*net.TCPAddr).Port))
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

type reply struct {
	code   int
	body   checkBody
	weight string
	ctype  string
	err    error
}

var client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func get(port uint16, path string) reply {
	resp, err := client.Get(fmt.Sprintf("http://%s:%d%s", loopback, port, path))
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	r := reply{code: resp.StatusCode, weight: resp.Header.Get("X-Load-Balancing-Endpoint-Weight"),
		ctype: resp.Header.Get("Content-Type"), err: err}
	if err == nil {
		r.err = json.Unmarshal(raw, &r.body)
	}
	return r
}

func want(code int, key model.ServiceKey, n int, healthy bool) reply {
	r := reply{code: code, weight: fmt.Sprint(n), ctype: "application/json"}
	r.body.Service.Namespace, r.body.Service.Name = key.Namespace, key.Name
	r.body.LocalEndpoints, r.body.ServiceProxyHealthy = n, healthy
	return r
}

func refused(r reply) bool { return errors.Is(r.err, syscall.ECONNREFUSED) }

type recorder struct {
	mu              sync.Mutex
	failed          []uint16
	serving, broken int
}

func (r *recorder) ListenFailed(port uint16, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = append(r.failed, port)
}

func (r *recorder) Listeners(serving, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.serving, r.broken = serving, failed
}

func newServer(t *testing.T, healthy *atomic.Bool, obs CheckObserver) *CheckServer {
	t.Helper()
	s := NewCheckServer(CheckConfig{Addresses: []netip.Addr{netip.MustParseAddr(loopback)}, Healthy: healthy.Load, Observer: obs, Log: logr.Discard()})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestServe(t *testing.T) {
	ports := freePorts(t, 3)
	var healthy atomic.Bool
	healthy.Store(true)
	s := newServer(t, &healthy, nil)

	steps := []struct {
		name    string
		update  map[model.ServiceKey]Check
		healthy bool
		probes  map[uint16]reply // nil reply field err means: want connection refused
	}{
		{"local endpoints: 200 with the count", map[model.ServiceKey]Check{web: {Port: ports[0], LocalEndpoints: 2}, rtp: {Port: ports[1]}}, true,
			map[uint16]reply{ports[0]: want(200, web, 2, true), ports[1]: want(503, rtp, 0, true)}},
		{"count changes without reopening", map[model.ServiceKey]Check{web: {Port: ports[0]}, rtp: {Port: ports[1], LocalEndpoints: 1}}, true,
			map[uint16]reply{ports[0]: want(503, web, 0, true), ports[1]: want(200, rtp, 1, true)}},
		{"proxy unhealthy: 503 even with endpoints", map[model.ServiceKey]Check{web: {Port: ports[0], LocalEndpoints: 3}, rtp: {Port: ports[1], LocalEndpoints: 1}}, false,
			map[uint16]reply{ports[0]: want(503, web, 3, false), ports[1]: want(503, rtp, 1, false)}},
		{"port moved: old one closed", map[model.ServiceKey]Check{web: {Port: ports[2], LocalEndpoints: 1}, rtp: {Port: ports[1], LocalEndpoints: 1}}, true,
			map[uint16]reply{ports[0]: {err: syscall.ECONNREFUSED}, ports[2]: want(200, web, 1, true), ports[1]: want(200, rtp, 1, true)}},
		{"service gone: port closed", map[model.ServiceKey]Check{rtp: {Port: ports[1], LocalEndpoints: 1}}, true,
			map[uint16]reply{ports[2]: {err: syscall.ECONNREFUSED}, ports[1]: want(200, rtp, 1, true)}},
		{"port handed from one service to another in one update", map[model.ServiceKey]Check{web: {Port: ports[1], LocalEndpoints: 4}}, true,
			map[uint16]reply{ports[1]: want(200, web, 4, true)}},
		{"no port: nothing served", map[model.ServiceKey]Check{web: {}}, true,
			map[uint16]reply{ports[1]: {err: syscall.ECONNREFUSED}}},
	}
	for _, st := range steps {
		healthy.Store(st.healthy)
		if err := s.Update(st.update); err != nil {
			t.Fatalf("%s: Update: %v", st.name, err)
		}
		for port, w := range st.probes {
			for _, path := range []string{"/", "/healthz"} { // any path answers
				got := get(port, path)
				if w.err != nil {
					if !refused(got) {
						t.Errorf("%s: GET :%d%s: got %+v, want connection refused", st.name, port, path, got)
					}
					continue
				}
				if got.err != nil || !reflect.DeepEqual(got, w) {
					t.Errorf("%s: GET :%d%s:\ngot  %+v\nwant %+v", st.name, port, path, got, w)
				}
			}
		}
	}
}

// TestBindFailure proves a port that cannot be opened is reported (error, Observer) without
// affecting the other Services, and retried by the next Update.
func TestBindFailure(t *testing.T) {
	ports := freePorts(t, 2)
	busy, err := net.Listen("tcp", fmt.Sprintf("%s:%d", loopback, ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	var healthy atomic.Bool
	healthy.Store(true)
	obs := &recorder{}
	s := newServer(t, &healthy, obs)
	svcs := map[model.ServiceKey]Check{web: {Port: ports[0], LocalEndpoints: 1}, rtp: {Port: ports[1], LocalEndpoints: 1}}

	err = s.Update(svcs)
	if err == nil || !strings.Contains(err.Error(), "ns/web") || !strings.Contains(err.Error(), fmt.Sprint(ports[0])) {
		t.Errorf("Update with a busy port: got error %v, want one naming ns/web and port %d", err, ports[0])
	}
	if !reflect.DeepEqual(obs.failed, []uint16{ports[0]}) || obs.serving != 1 || obs.broken != 1 {
		t.Errorf("observer: got failed %v serving %d broken %d, want [%d] 1 1", obs.failed, obs.serving, obs.broken, ports[0])
	}
	if got, w := get(ports[1], "/"), want(200, rtp, 1, true); !reflect.DeepEqual(got, w) {
		t.Errorf("other service: got %+v, want %+v", got, w)
	}
	if got := s.Addrs(web); len(got) != 0 {
		t.Errorf("failed service listens on %v, want nothing", got)
	}

	busy.Close()
	if err := s.Update(svcs); err != nil {
		t.Fatalf("Update after the port was freed: %v", err)
	}
	if got, w := get(ports[0], "/"), want(200, web, 1, true); !reflect.DeepEqual(got, w) {
		t.Errorf("retried service: got %+v, want %+v", got, w)
	}
	if obs.serving != 2 || obs.broken != 0 {
		t.Errorf("observer after retry: serving %d broken %d, want 2 0", obs.serving, obs.broken)
	}
}

// TestClose proves Close releases every port (they can be bound again at once).
func TestClose(t *testing.T) {
	ports := freePorts(t, 2)
	var healthy atomic.Bool
	s := newServer(t, &healthy, nil)
	if err := s.Update(map[model.ServiceKey]Check{web: {Port: ports[0]}, rtp: {Port: ports[1]}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range ports {
		ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", loopback, p))
		if err != nil {
			t.Errorf("port %d after Close: %v, want it free", p, err)
			continue
		}
		ln.Close()
	}
}

func TestChecksFromSnapshot(t *testing.T) {
	const node = "node-1"
	ep := func(addr, nodeName string, ready, terminating bool) model.Endpoint {
		return model.Endpoint{Addr: netip.MustParseAddr(addr), Port: 80, Ready: ready, Serving: ready || terminating,
			Terminating: terminating}.At(nodeName, "")
	}
	port := func(name string, local bool, hc uint16, eps ...model.Endpoint) model.ServicePort {
		return model.ServicePort{Name: model.PortName{Service: web, Port: name, Protocol: model.TCP}, Port: 80,
			ExternalTrafficLocal: local, HealthCheckNodePort: hc, Endpoints: eps}
	}
	svc := func(ports ...model.ServicePort) *model.Service { return &model.Service{Key: web, Ports: ports} }
	tests := []struct {
		name string
		svc  *model.Service
		want map[model.ServiceKey]Check
	}{
		{"local ready endpoints counted", svc(port("http", true, 32000,
			ep("198.18.128.11", node, true, false), ep("198.18.128.12", node, true, false), ep("198.18.128.13", "node-2", true, false))),
			map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 2}}},
		{"not ready and terminating do not count", svc(port("http", true, 32000,
			ep("198.18.128.11", node, false, false), ep("198.18.128.12", node, false, true), ep("198.18.128.13", node, true, false))),
			map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 1}}},
		{"no local endpoints: served with 0", svc(port("http", true, 32000, ep("198.18.128.13", "node-2", true, false))),
			map[model.ServiceKey]Check{web: {Port: 32000}}},
		{"distinct pods over ports", svc(port("http", true, 32000, ep("198.18.128.11", node, true, false)),
			port("https", true, 32000, ep("198.18.128.11", node, true, false), ep("198.18.128.12", node, true, false))),
			map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 2}}},
		{"dual stack pods count once", svc(port("http", true, 32000, ep("198.18.128.11", node, true, false), ep("fd00:128::11", node, true, false))),
			map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 1}}},
		{"cluster policy: none", svc(port("http", false, 0, ep("198.18.128.11", node, true, false))), map[model.ServiceKey]Check{}},
		{"local without a health-check port: none", svc(port("http", true, 0, ep("198.18.128.11", node, true, false))), map[model.ServiceKey]Check{}},
		{"rejected: none", &model.Service{Key: web, Rejected: &model.Rejection{Reason: "x"}}, map[model.ServiceKey]Check{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ChecksFromSnapshot(model.Snapshot{Services: map[model.ServiceKey]*model.Service{web: tc.svc}}, node)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBindsOnlyNodePortAddresses: with --nodeport-addresses, a health-check node port is opened
// on the node's addresses inside those CIDRs and nowhere else (kube-proxy's behaviour), not on
// the wildcard address.
func TestBindsOnlyNodePortAddresses(t *testing.T) {
	ports := freePorts(t, 1)
	local := func() ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2"), netip.MustParseAddr("192.0.2.1")}, nil
	}
	s := NewCheckServer(CheckConfig{NodePortCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32"), netip.MustParsePrefix("198.51.100.0/24")},
		LocalAddrs: local, Log: logr.Discard()})
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Update(map[model.ServiceKey]Check{web: {Port: ports[0], LocalEndpoints: 1}}); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("[127.0.0.2:%d]", ports[0])
	if got := fmt.Sprint(s.Addrs(web)); got != want {
		t.Errorf("listens on %s, want %s", got, want)
	}
	if got := get(ports[0], "/"); !refused(got) {
		t.Errorf("GET 127.0.0.1:%d (outside --nodeport-addresses): got %+v, want connection refused", ports[0], got)
	}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.2:%d/", ports[0]))
	if err != nil {
		t.Fatalf("GET 127.0.0.2:%d: %v", ports[0], err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("GET 127.0.0.2:%d: %d, want 200", ports[0], resp.StatusCode)
	}

	// No node address inside the CIDRs: the port is not opened, and the error says why.
	none := NewCheckServer(CheckConfig{NodePortCIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}, LocalAddrs: local, Log: logr.Discard()})
	t.Cleanup(func() { _ = none.Close() })
	if err := none.Update(map[model.ServiceKey]Check{web: {Port: ports[0], LocalEndpoints: 1}}); err == nil || !strings.Contains(err.Error(), "--nodeport-addresses") {
		t.Errorf("no address in the CIDRs: Update error %v, want one naming --nodeport-addresses", err)
	}
}

// TestRetryTakesOverFreedPort is a migration's handover: another process (kube-proxy) holds a
// Service's health-check node port and answers it; nftproxy cannot open it, and without any
// further Update (no sync needs to happen) Run opens it once the other process lets it go.
// Until then the other process answers, never nftproxy's 503 nor a refusal.
func TestRetryTakesOverFreedPort(t *testing.T) {
	ports := freePorts(t, 1)
	other, err := net.Listen("tcp", fmt.Sprintf("%s:%d", loopback, ports[0]))
	if err != nil {
		t.Fatal(err)
	}
	otherSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", "7")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"service":{"namespace":"ns","name":"web"},"localEndpoints":7,"serviceProxyHealthy":true}`)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = otherSrv.Serve(other) }()
	defer otherSrv.Close()

	var healthy atomic.Bool
	healthy.Store(true)
	obs := &recorder{}
	s := NewCheckServer(CheckConfig{Addresses: []netip.Addr{netip.MustParseAddr(loopback)}, Healthy: healthy.Load,
		RetryInterval: 10 * time.Millisecond, Observer: obs, Log: logr.Discard()})
	if err := s.Update(map[model.ServiceKey]Check{web: {Port: ports[0], LocalEndpoints: 1}}); err == nil {
		t.Fatal("Update while another process holds the port: got no error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		if got := get(ports[0], "/"); !refused(got) {
			t.Errorf("after Run ended: got %+v, want the port closed", got)
		}
	}()

	for range 5 {
		if got := get(ports[0], "/"); got.err != nil || got.code != 200 || got.weight != "7" {
			t.Fatalf("while the other process holds the port: got %+v, want its answer (200, weight 7)", got)
		}
	}
	otherSrv.Close()
	var got reply
	refusedProbes := 0
	for i := 0; i < 500; i++ { // 500 probes 10 ms apart: far more than the 10 ms retry
		if got = get(ports[0], "/"); got.err == nil {
			break
		}
		if refused(got) {
			refusedProbes++
		}
		time.Sleep(10 * time.Millisecond)
	}
	if w := want(200, web, 1, true); !reflect.DeepEqual(got, w) {
		t.Fatalf("after the other process let the port go: got %+v, want %+v", got, w)
	}
	t.Logf("probes refused in the handover: %d (retry every 10ms)", refusedProbes)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.serving != 1 || obs.broken != 0 {
		t.Errorf("observer after the retry: serving %d broken %d, want 1 0", obs.serving, obs.broken)
	}
}
