// Package probe is the data-plane bench's network: a client namespace, a node namespace (where a
// service proxy programs its rules) and a backend namespace that owns every pod address of the
// benchmark workload, with a TCP server answering on all of them. It measures the first-packet
// latency of a new connection (the TCP connect round trip, which the NAT lookup of the first
// packet sits in) and the end-to-end time for a Service change to reach the data plane.
//
//	client 198.18.1.2/24 ── 198.18.1.1 [node] 198.18.0.1/30 ── 198.18.0.2/30 backend
//	                                     routes pods via backend     local routes for every pod
//	                                                                 address (AnyIP), server :8080
package probe

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/nftproxy/nftproxy/test/netns"
)

// Addresses of the topology; the node's uplink address is the workload's node address.
var (
	ClientAddr = netip.MustParseAddr("198.18.1.2")
	clientGW   = "198.18.1.1"
	nodeAddr   = "198.18.0.1"
	backendGW  = "198.18.0.2"
	// PodPrefixes are the pod addresses the backend answers on: the workload's pods
	// (198.18.16.0 upwards) and the probe endpoints (198.18.15.0/24).
	PodPrefixes = []string{"198.18.15.0/24", "198.18.16.0/20", "198.18.32.0/19", "198.18.64.0/18", "198.18.128.0/17"}
)

// ServerPort is where the backend listens (the workload's TCP targetPort).
const ServerPort = 8080

// Topology is the three namespaces and the backend's server.
type Topology struct {
	Client, Node, Backend *netns.NS
	ln                    net.Listener
	wg                    sync.WaitGroup
}

// New creates the namespaces, links, routes and the backend server. Close removes them.
func New() (*Topology, error) {
	t := &Topology{}
	var err error
	for _, p := range []struct {
		ns   **netns.NS
		name string
	}{{&t.Client, "nftp-cli"}, {&t.Node, "nftp-node"}, {&t.Backend, "nftp-be"}} {
		if *p.ns, err = netns.Create(p.name); err != nil {
			t.Close()
			return nil, err
		}
	}
	cmds := [][]string{
		{"ip", "link", "add", "c0", "type", "veth", "peer", "name", "eth0", "netns", t.Client.Name},
		{"ip", "link", "add", "b0", "type", "veth", "peer", "name", "eth0", "netns", t.Backend.Name},
		{"ip", "addr", "add", clientGW + "/24", "dev", "c0"},
		{"ip", "addr", "add", nodeAddr + "/30", "dev", "b0"},
		{"ip", "link", "set", "c0", "up"},
		{"ip", "link", "set", "b0", "up"},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	for _, p := range PodPrefixes {
		cmds = append(cmds, []string{"ip", "route", "add", p, "via", backendGW})
	}
	if err := run(t.Node, cmds); err != nil {
		t.Close()
		return nil, err
	}
	if err := run(t.Client, [][]string{
		{"ip", "addr", "add", ClientAddr.String() + "/24", "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", clientGW},
	}); err != nil {
		t.Close()
		return nil, err
	}
	be := [][]string{
		{"ip", "addr", "add", backendGW + "/30", "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", nodeAddr},
	}
	for _, p := range PodPrefixes {
		be = append(be, []string{"ip", "route", "add", "local", p, "dev", "lo", "table", "local"})
	}
	if err := run(t.Backend, be); err != nil {
		t.Close()
		return nil, err
	}
	if err := t.Backend.Do(func() error {
		var err error
		t.ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", ServerPort))
		return err
	}); err != nil {
		t.Close()
		return nil, fmt.Errorf("backend server: %w", err)
	}
	t.wg.Add(1)
	go t.serve()
	return t, nil
}

func run(ns *netns.NS, cmds [][]string) error {
	for _, c := range cmds {
		if _, err := ns.Run(c...); err != nil {
			return err
		}
	}
	return nil
}

// serve answers each connection with the address it reached (after DNAT), then closes it.
func (t *Topology) serve() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		local := c.LocalAddr().(*net.TCPAddr).IP.String()
		go func() {
			defer c.Close()
			w := bufio.NewWriter(c)
			w.WriteString(local + "\n")
			w.Flush()
		}()
	}
}

// Close stops the server and removes the namespaces.
func (t *Topology) Close() error {
	if t.ln != nil {
		t.ln.Close()
		t.wg.Wait()
	}
	var errs []error
	for _, ns := range []*netns.NS{t.Client, t.Node, t.Backend} {
		if ns != nil {
			errs = append(errs, ns.Close())
		}
	}
	return errors.Join(errs...)
}

// trimLine is the first line of s.
func trimLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
