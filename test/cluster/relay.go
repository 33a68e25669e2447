package cluster

import (
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// A network namespace has its own loopback, so a daemon inside a test namespace cannot dial the
// API server on the host's 127.0.0.1. A relay bridges the two: its listening socket is opened
// inside the namespace (on the namespace's 127.0.0.1), while the goroutines that accept and
// dial run on ordinary threads, which are in the test's own namespace, so each accepted
// connection is spliced to the API server's real address. The daemon binary runs unchanged;
// its kubeconfig just names the relay. TLS passes through untouched and the serving certificate
// is valid for 127.0.0.1, so verification works as usual.

// Relay returns the https URL that reaches the API server from inside ns, starting the relay
// on first use; it stops when t ends. Connections made while the API server is stopped are
// closed at once, as a refused connection would be.
func (c *Cluster) Relay(t testing.TB, ns *netns.NS) string {
	t.Helper()
	return c.relay(t, ns, "0")
}

// RelaySamePort is Relay listening on the API server's own port inside ns (free in a fresh
// namespace), so the URL is the same in every namespace: one ConfigMap naming the API server
// serves every node of a cluster whose nodes are namespaces. The first call for ns decides
// its relay's port.
func (c *Cluster) RelaySamePort(t testing.TB, ns *netns.NS) string {
	t.Helper()
	return c.relay(t, ns, strconv.Itoa(c.apiPort))
}

func (c *Cluster) relay(t testing.TB, ns *netns.NS, port string) string {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if r, ok := c.relays[ns.Name]; ok {
		return r.url
	}
	r, err := startRelay(ns, port, hostPort(c.apiPort))
	if err != nil {
		t.Fatalf("relay into %s: %v", ns.Name, err)
	}
	c.relays[ns.Name] = r
	t.Cleanup(func() {
		c.mu.Lock()
		delete(c.relays, ns.Name)
		c.mu.Unlock()
		r.close()
	})
	return r.url
}

// KubeconfigFor writes a kubeconfig for a that works from inside ns (through the relay) and
// returns its path.
func (c *Cluster) KubeconfigFor(t testing.TB, ns *netns.NS, a Access) string {
	t.Helper()
	a.Server = c.Relay(t, ns)
	path := filepath.Join(t.TempDir(), ns.Name+".kubeconfig")
	if err := a.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// relay accepts TCP connections on a listener inside a namespace and splices each to target.
type relay struct {
	url    string
	target string
	ln     net.Listener

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func startRelay(ns *netns.NS, port, target string) (*relay, error) {
	var ln net.Listener
	err := ns.Do(func() error {
		var err error
		ln, err = net.Listen("tcp", net.JoinHostPort("127.0.0.1", port))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listen in %s: %w", ns.Name, err)
	}
	r := &relay{
		url:    "https://" + ln.Addr().String(),
		target: target,
		ln:     ln,
		conns:  map[net.Conn]struct{}{},
	}
	r.wg.Add(1)
	go r.serve()
	return r, nil
}

func (r *relay) serve() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		r.wg.Add(1)
		go r.splice(c)
	}
}

// track registers c so close can end it; false when the relay is closing.
func (r *relay) track(c net.Conn, add bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conns == nil {
		return false
	}
	if add {
		r.conns[c] = struct{}{}
	} else {
		delete(r.conns, c)
	}
	return true
}

func (r *relay) splice(in net.Conn) {
	defer r.wg.Done()
	defer in.Close()
	if !r.track(in, true) {
		return
	}
	defer r.track(in, false)
	out, err := net.DialTimeout("tcp", r.target, 5*time.Second)
	if err != nil {
		return // API server down: the client sees the connection close
	}
	defer out.Close()
	if !r.track(out, true) {
		return
	}
	defer r.track(out, false)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite() // pass the half-close on
		}
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}

// close stops accepting, ends every open connection and waits for the goroutines.
func (r *relay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	for c := range r.conns {
		c.Close()
	}
	r.conns = nil
	r.mu.Unlock()
	r.wg.Wait()
}
