package health

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/netns"
)

// The kernel test's address plan: a node namespace and a client namespace joined by a veth,
// node 198.18.0.1 / fd00::1, client 198.18.0.2 / fd00::2; a Service with ClusterIPs 198.19.0.10
// and fd00:19::10, health-check node port 32000; nftproxy's listener on 10253.
const (
	kNode4, kNode6     = "198.18.0.1", "fd00::1"
	kClient4, kClient6 = "198.18.0.2", "fd00::2"
	kHCPort            = 32000
	kListenPort        = 10253
)

// kernelLab is a node namespace holding the builder's ruleset with one health-check node port,
// and a client namespace to probe it from.
func kernelLab(t *testing.T) (node, client *netns.NS) {
	t.Helper()
	node, client = netns.New(t, "hck-node"), netns.New(t, "hck-client")
	for _, c := range [][]string{
		{"ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1", "netns", client.Name},
		{"ip", "addr", "add", kNode4 + "/24", "dev", "eth0"},
		{"ip", "addr", "add", kNode6 + "/64", "dev", "eth0", "nodad"},
		{"ip", "link", "set", "eth0", "up"},
	} {
		if out, err := node.Run(c...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	for _, c := range [][]string{
		{"ip", "addr", "add", kClient4 + "/24", "dev", "eth1"},
		{"ip", "addr", "add", kClient6 + "/64", "dev", "eth1", "nodad"},
		{"ip", "link", "set", "eth1", "up"},
	} {
		if out, err := client.Run(c...); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
	}
	web := model.ServiceKey{Namespace: "ns", Name: "web"}
	svc := &model.Service{Key: web, Ports: []model.ServicePort{{
		Name: model.PortName{Service: web, Port: "http", Protocol: model.TCP}, Port: 80, NodePort: 30080,
		ClusterIPs:           []netip.Addr{netip.MustParseAddr("198.19.0.10"), netip.MustParseAddr("fd00:19::10")},
		ExternalTrafficLocal: true, HealthCheckNodePort: kHCPort,
	}}}
	nodeMdl := &model.Node{Name: "node-1", Addresses: []netip.Addr{netip.MustParseAddr(kNode4), netip.MustParseAddr(kNode6)}}
	for _, fam := range []nft.Family{nft.IPv4, nft.IPv6} {
		b, err := ruleset.NewBuilder(ruleset.Config{Family: fam, MasqueradeMark: 0x4000, DropMark: 0x8000, NodeName: "node-1", HealthCheckPort: kListenPort})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := node.RunStdin(nft.Render(b.Ruleset(nodeMdl, []*model.Service{svc})), "nft", "-f", "-"); err != nil {
			t.Fatalf("load the %s ruleset: %v: %s", fam, err, out)
		}
	}
	return node, client
}

// probeFrom sends one health-check request from ns to addr:port.
func probeFrom(t *testing.T, ns *netns.NS, addr string, port int) reply {
	t.Helper()
	var c net.Conn
	if err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", net.JoinHostPort(addr, fmt.Sprint(port)), 5*time.Second)
		return err
	}); err != nil {
		return reply{err: err}
	}
	return ask(c, "/healthz")
}

// otherHolder listens on the health-check node port in ns as another process would (kube-proxy
// before it exits), on host ("" is the wildcard address), answering 200 with "holder".
func otherHolder(t *testing.T, ns *netns.NS, host string) (stop func()) {
	t.Helper()
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", net.JoinHostPort(host, fmt.Sprint(kHCPort)))
		return err
	}); err != nil {
		t.Fatalf("another process's listener on %d: %v", kHCPort, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", "7")
		_, _ = io.WriteString(w, "holder")
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			_ = srv.Close()
		}
	}
	t.Cleanup(stop)
	return stop
}

func isHolder(r reply) bool { return r.err == nil && r.code == 200 && r.weight == "7" }

// TestKernelRedirectedToListener: the builder's rules send a probe of the health-check node port
// to the listener, from a client (prerouting) and from the node itself (output), in both
// families, and the listener names the Service from the original destination. While another
// process holds the node port, a client's probe reaches that process (the socket lookup); the
// first probe after it closes reaches the listener, with no Update in between. The node's own
// probes reach the listener throughout: at output the kernel's socket lookup finds the sender.
func TestKernelRedirectedToListener(t *testing.T) {
	node, client := kernelLab(t)
	var healthy atomic.Bool
	healthy.Store(true)
	s := NewCheckServer(CheckConfig{Port: kListenPort, Healthy: healthy.Load, UnknownPortWait: 100 * time.Millisecond, Log: logr.Discard()})
	if err := node.Do(s.Listen); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	web := model.ServiceKey{Namespace: "ns", Name: "web"}
	if err := s.Update(map[model.ServiceKey]Check{web: {Port: kHCPort, LocalEndpoints: 2}}); err != nil {
		t.Fatal(err)
	}
	w := want(200, web, 2, true)
	for _, c := range []struct {
		from *netns.NS
		name string
		addr string
	}{{client, "client", kNode4}, {client, "client", kNode6}, {node, "node", kNode4}, {node, "node", kNode6}} {
		if got := probeFrom(t, c.from, c.addr, kHCPort); !reflect.DeepEqual(got, w) {
			t.Errorf("%s to %s: got %+v, want the listener's %+v", c.name, c.addr, got, w)
		}
	}
	// Nothing else is redirected: the listener's own port answers 503 (no Service), and a node
	// port that is not a health-check port is refused.
	if got := probeFrom(t, client, kNode4, kListenPort); got.err != nil || got.code != http.StatusServiceUnavailable {
		t.Errorf("client to the listener's own port: got %+v, want a plain 503", got)
	}
	if got := probeFrom(t, client, kNode4, kHCPort+1); got.err == nil {
		t.Errorf("client to port %d: got %+v, want refused", kHCPort+1, got)
	}

	for _, host := range []string{"", kNode4} { // kube-proxy binds the wildcard, or --nodeport-addresses
		stop := otherHolder(t, node, host)
		if got := probeFrom(t, client, kNode4, kHCPort); !isHolder(got) {
			t.Errorf("another process holds %s:%d: client got %+v, want that process's answer", host, kHCPort, got)
		}
		if got := probeFrom(t, node, kNode4, kHCPort); !reflect.DeepEqual(got, w) {
			t.Errorf("another process holds %s:%d: the node's own probe got %+v, want the listener's %+v", host, kHCPort, got, w)
		}
		stop()
		if got := probeFrom(t, client, kNode4, kHCPort); !reflect.DeepEqual(got, w) {
			t.Errorf("after the other process closed %s:%d: client got %+v, want the listener's %+v at once", host, kHCPort, got, w)
		}
	}
	// With the listener closed, the redirect has nowhere to go: the node port is refused, as a
	// port no process holds.
	_ = s.Close()
	if got := probeFrom(t, client, kNode4, kHCPort); got.err == nil {
		t.Errorf("after Close: got %+v, want refused", got)
	}
}
