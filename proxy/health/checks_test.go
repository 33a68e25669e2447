package health

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
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

type reply struct {
	code   int
	body   checkBody
	weight string
	ctype  string
	err    error
}

func want(code int, key model.ServiceKey, n int, healthy bool) reply {
	r := reply{code: code, weight: fmt.Sprint(n), ctype: "application/json"}
	r.body.Service.Namespace, r.body.Service.Name = key.Namespace, key.Name
	r.body.LocalEndpoints, r.body.ServiceProxyHealthy = n, healthy
	return r
}

// redirects stands in for the kernel's NAT in the unit tests: the health-check node port each
// client connection "was sent to", by the client's address as the listener sees it.
type redirects struct{ m sync.Map }

func (r *redirects) originalDst(c net.Conn) (netip.AddrPort, error) {
	if v, ok := r.m.Load(c.RemoteAddr().String()); ok {
		return v.(netip.AddrPort), nil
	}
	return netip.AddrPort{}, fmt.Errorf("no redirect recorded for %v: %w", c.RemoteAddr(), syscall.ENOENT)
}

// dial opens a connection to s as if a probe for hcPort had been redirected there.
func (r *redirects) dial(t *testing.T, s *CheckServer, hcPort uint16) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", s.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial the listener: %v", err)
	}
	r.m.Store(c.LocalAddr().String(), netip.AddrPortFrom(netip.MustParseAddr(loopback), hcPort))
	return c
}

// ask sends one request on c and reads the answer.
func ask(c net.Conn, path string) reply {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n", path); err != nil {
		return reply{err: err}
	}
	return readReply(c)
}

func readReply(c net.Conn) reply {
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	r := reply{code: resp.StatusCode, weight: resp.Header.Get("X-Load-Balancing-Endpoint-Weight"), ctype: resp.Header.Get("Content-Type"), err: err}
	if err == nil && r.ctype == "application/json" {
		r.err = json.Unmarshal(raw, &r.body)
	}
	return r
}

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

// newServer is a listening CheckServer on a free loopback port whose original destinations come
// from rd.
func newServer(t *testing.T, healthy *atomic.Bool, rd *redirects, obs CheckObserver) *CheckServer {
	t.Helper()
	s := NewCheckServer(CheckConfig{Host: loopback, Healthy: healthy.Load, Observer: obs, OriginalDst: rd.originalDst,
		UnknownPortWait: 20 * time.Millisecond, Log: logr.Discard()})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestServe(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	rd := &redirects{}
	obs := &recorder{}
	s := newServer(t, &healthy, rd, obs)

	steps := []struct {
		name    string
		update  map[model.ServiceKey]Check
		healthy bool
		probes  map[uint16]reply // code 0: want a 503 naming no Service
	}{
		{"local endpoints: 200 with the count", map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 2}, rtp: {Port: 32001}}, true,
			map[uint16]reply{32000: want(200, web, 2, true), 32001: want(503, rtp, 0, true)}},
		{"count changes", map[model.ServiceKey]Check{web: {Port: 32000}, rtp: {Port: 32001, LocalEndpoints: 1}}, true,
			map[uint16]reply{32000: want(503, web, 0, true), 32001: want(200, rtp, 1, true)}},
		{"proxy unhealthy: 503 even with endpoints", map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 3}, rtp: {Port: 32001, LocalEndpoints: 1}}, false,
			map[uint16]reply{32000: want(503, web, 3, false), 32001: want(503, rtp, 1, false)}},
		{"port moved: the old one names no Service", map[model.ServiceKey]Check{web: {Port: 32002, LocalEndpoints: 1}, rtp: {Port: 32001, LocalEndpoints: 1}}, true,
			map[uint16]reply{32000: {}, 32002: want(200, web, 1, true), 32001: want(200, rtp, 1, true)}},
		{"port handed from one service to another in one update", map[model.ServiceKey]Check{web: {Port: 32001, LocalEndpoints: 4}}, true,
			map[uint16]reply{32001: want(200, web, 4, true), 32002: {}}},
		{"no port: nothing served", map[model.ServiceKey]Check{web: {}}, true, map[uint16]reply{32001: {}}},
	}
	for _, st := range steps {
		healthy.Store(st.healthy)
		if err := s.Update(st.update); err != nil {
			t.Fatalf("%s: Update: %v", st.name, err)
		}
		for port, w := range st.probes {
			for _, path := range []string{"/", "/healthz"} { // any path answers
				got := ask(rd.dial(t, s, port), path)
				if w.code == 0 {
					if got.err != nil || got.code != http.StatusServiceUnavailable || got.ctype == "application/json" {
						t.Errorf("%s: port %d %s: got %+v, want a plain 503 (no Service)", st.name, port, path, got)
					}
					continue
				}
				if got.err != nil || !reflect.DeepEqual(got, w) {
					t.Errorf("%s: port %d %s:\ngot  %+v\nwant %+v", st.name, port, path, got, w)
				}
			}
		}
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if obs.serving != 0 || obs.broken != 0 || len(obs.failed) != 0 {
		t.Errorf("observer after the last update: serving %d failed %d listen failures %v, want 0 0 none", obs.serving, obs.broken, obs.failed)
	}
}

// TestHeadersAndBody pins the answer's exact form, kube-proxy's: JSON indented with tabs,
// nosniff, the weight header.
func TestHeadersAndBody(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	rd := &redirects{}
	s := newServer(t, &healthy, rd, nil)
	if err := s.Update(map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 2}}); err != nil {
		t.Fatal(err)
	}
	c := rd.dial(t, s, 32000)
	defer c.Close()
	fmt.Fprintf(c, "GET /anything HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	wantBody := "{\n\t\"service\": {\n\t\t\"namespace\": \"ns\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 2,\n\t\"serviceProxyHealthy\": true\n}"
	if resp.StatusCode != 200 || string(body) != wantBody || resp.Header.Get("X-Content-Type-Options") != "nosniff" ||
		resp.Header.Get("X-Load-Balancing-Endpoint-Weight") != "2" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("got %d %v\n%s\nwant 200, nosniff, weight 2, application/json and\n%s", resp.StatusCode, resp.Header, body, wantBody)
	}
}

// TestWaitsForFirstUpdate: before the model's first complete state a redirected connection is
// not answered (it waits in the backlog); the first Update answers it with that state.
func TestWaitsForFirstUpdate(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	rd := &redirects{}
	s := newServer(t, &healthy, rd, nil)
	c := rd.dial(t, s, 32000)
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("before the first Update: read %d bytes, %v; want no answer yet", n, err)
	}
	if err := s.Update(map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 1}}); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, w := readReply(c), want(200, web, 1, true); !reflect.DeepEqual(got, w) {
		t.Errorf("after the first Update: got %+v, want %+v", got, w)
	}
}

// TestUnknownPortWaitsForUpdate: a connection for a port the last Update did not know (a new
// Service whose rules just committed) is answered once an Update knows it.
func TestUnknownPortWaitsForUpdate(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	rd := &redirects{}
	s := NewCheckServer(CheckConfig{Host: loopback, Healthy: healthy.Load, OriginalDst: rd.originalDst, UnknownPortWait: time.Minute, Log: logr.Discard()})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Update(map[model.ServiceKey]Check{rtp: {Port: 32001}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan reply, 1)
	go func() { done <- ask(rd.dial(t, s, 32000), "/") }()
	time.Sleep(50 * time.Millisecond) // usually the request waits by now; either order must answer
	if err := s.Update(map[model.ServiceKey]Check{rtp: {Port: 32001}, web: {Port: 32000, LocalEndpoints: 1}}); err != nil {
		t.Fatal(err)
	}
	if got, w := <-done, want(200, web, 1, true); !reflect.DeepEqual(got, w) {
		t.Errorf("got %+v, want %+v", got, w)
	}
}

// TestDuplicatePort: two Services claiming one port (hand-written manifests) answer as the
// first by name; the error names both.
func TestDuplicatePort(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	rd := &redirects{}
	s := newServer(t, &healthy, rd, nil)
	err := s.Update(map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 1}, rtp: {Port: 32000, LocalEndpoints: 2}})
	if err == nil || !strings.Contains(err.Error(), "ns/web") || !strings.Contains(err.Error(), "ns/rtp") {
		t.Errorf("Update: got %v, want an error naming ns/web and ns/rtp", err)
	}
	if got, w := ask(rd.dial(t, s, 32000), "/"), want(200, rtp, 2, true); !reflect.DeepEqual(got, w) {
		t.Errorf("got %+v, want ns/rtp's answer %+v", got, w)
	}
}

// TestListenRetry: a taken port is reported (error, Observer) and Run opens the listener once
// it is free; Close refuses connections and releases the port.
func TestListenRetry(t *testing.T) {
	busy, err := net.Listen("tcp", loopback+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(busy.Addr().(*net.TCPAddr).Port)
	obs := &recorder{}
	rd := &redirects{}
	s := NewCheckServer(CheckConfig{Host: loopback, Port: port, RetryInterval: 10 * time.Millisecond, Observer: obs, OriginalDst: rd.originalDst, Log: logr.Discard()})
	defer s.Close()
	if err := s.Listen(); err == nil || !strings.Contains(err.Error(), "--health-check-port") {
		t.Fatalf("Listen on a taken port: got %v, want an error naming --health-check-port", err)
	}
	if err := s.Update(map[model.ServiceKey]Check{web: {Port: 32000, LocalEndpoints: 1}}); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	if len(obs.failed) != 1 || obs.failed[0] != port || obs.serving != 0 || obs.broken != 1 {
		t.Errorf("observer while the port is taken: failed %v serving %d broken %d, want [%d] 0 1", obs.failed, obs.serving, obs.broken, port)
	}
	obs.mu.Unlock()
	busy.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Run(ctx); err != nil {
		t.Fatalf("Run after the port was freed: %v", err)
	}
	if got, w := ask(rd.dial(t, s, 32000), "/"), want(200, web, 1, true); !reflect.DeepEqual(got, w) {
		t.Errorf("got %+v, want %+v", got, w)
	}
	obs.mu.Lock()
	if obs.serving != 1 || obs.broken != 0 {
		t.Errorf("observer once open: serving %d broken %d, want 1 0", obs.serving, obs.broken)
	}
	obs.mu.Unlock()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("%s:%d", loopback, port))
	if err != nil {
		t.Fatalf("port %d after Close: %v, want it free", port, err)
	}
	ln.Close()
}

// TestOriginalDstUntranslated: a connection no NAT touched has its own destination as original
// destination, or none when conntrack does not track it; either way never another port.
func TestOriginalDstUntranslated(t *testing.T) {
	ln, err := net.Listen("tcp", loopback+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			_, _ = c.Read(make([]byte, 1))
		}
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := OriginalDst(c)
	if err != nil && !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("OriginalDst: %v, want the local address or ENOENT", err)
	}
	if err == nil && got.String() != ln.Addr().String() {
		t.Errorf("OriginalDst: %v, want %v", got, ln.Addr())
	}
	if _, err := OriginalDst(&net.UnixConn{}); err == nil {
		t.Errorf("OriginalDst of a unix socket: no error")
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
