// Package lab builds a small cluster node out of network namespaces for data-plane tests and
// the demo: a node namespace that routes (where nftproxy runs), outside clients on their own
// links to it, and pods on a bridge, each pod answering TCP and UDP with its identity. Tests
// send real packets and assert on who answered and what address they saw.
//
// Everything lives in namespaces the lab creates and removes; nothing touches the caller's
// namespace. The fixed address plan is in plan.go; README.md draws the topology.
package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// Options shape a lab. The zero value is one client and two pods serving port 80.
type Options struct {
	// Prefix starts every namespace name; a random part is added so parallel labs never collide.
	// Default "nftp-lab".
	Prefix string
	// Clients is the number of outside clients, each on its own link to the node (default 1).
	Clients int
	// Pods is the number of pods on the node's bridge (default 2).
	Pods int
	// Ports are served by every pod on its IPv4 and IPv6 address. nil means port 80 on TCP and
	// UDP; an empty non-nil slice means no servers (a test starts its own with Serve).
	Ports []PortSpec
	// Logf receives setup notes and the output of processes started in the node. New sets it
	// to t.Logf; default: discard.
	Logf func(format string, args ...any)
}

// Host is a client or a pod: a namespace with one link ("eth0") to the node and a default route
// through it.
type Host struct {
	// Name is "client-N" or "pod-N" (N from 1); pods answer with it.
	Name string
	// NS is the host's namespace.
	NS *netns.NS
	// IPv4 and IPv6 are the host's addresses (see the address plan).
	IPv4, IPv6 netip.Addr
	// GatewayV4 and GatewayV6 are the node's addresses the host routes through.
	GatewayV4, GatewayV6 netip.Addr
	// NodeLink is the name of the node-side interface of the host's link.
	NodeLink string
	// Server is the pod's identity backend on Options.Ports; nil for clients.
	Server *Server
}

// Dial probes network address addr from the host; see Dialer.Dial.
func (h *Host) Dial(ctx context.Context, network, addr string) Result {
	return Dial(ctx, h.NS, network, addr)
}

// Spread probes addr n times from the host; see Dialer.Spread.
func (h *Host) Spread(ctx context.Context, network, addr string, n int) Tally {
	return Spread(ctx, h.NS, network, addr, n)
}

// AddAddress gives the host one more address on its link, for tests that need a second source
// (e.g. loadBalancerSourceRanges: one address allowed, one not). Pick it inside the host's own
// subnet (client-1: 198.18.1.3 to .254, fd00:1::3 on) so the node reaches it without a route;
// probe from it with Dialer.Source. It goes away with the lab.
func (h *Host) AddAddress(a netip.Addr) error {
	_, err := h.NS.Run("ip", "address", "add", netip.PrefixFrom(a, a.BitLen()).String(), "dev", "eth0", "nodad")
	return err
}

// Lab is a built topology. Close removes all of it.
type Lab struct {
	// Prefix is the unique prefix of every namespace of this lab.
	Prefix string
	// Node is the node namespace: it routes between clients and pods and is where nftproxy runs.
	Node *netns.NS
	// Gateway is the node's upstream router: it owns UplinkGatewayV4/V6 and drops the rest.
	Gateway *netns.NS
	// Clients are outside hosts, client-1 first.
	Clients []*Host
	// Pods are the pods on the bridge, pod-1 first.
	Pods []*Host
	// BridgeNetfilter reports whether the host kernel has br_netfilter loaded. If so, the lab
	// turns bridge-nf-call-iptables/ip6tables on in the node (as kubeadm requires), so frames
	// bridged between pods pass the node's nftables hooks; if not, pod-to-pod traffic on the
	// bridge never meets nftables. The lab does not load kernel modules.
	BridgeNetfilter bool

	logf func(format string, args ...any)

	mu     sync.Mutex
	procs  []*Process
	closed bool
}

// New builds a lab for t and removes it when t ends, failed or not. It skips t when namespaces
// cannot be created (see netns.Skip).
func New(t testing.TB, opts Options) *Lab {
	t.Helper()
	netns.Skip(t)
	if opts.Logf == nil {
		opts.Logf = t.Logf
	}
	l, err := Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("lab close: %v", err)
		}
	})
	return l
}

// Build creates the lab without a testing.T (for the demo). The caller must Close it; on error
// everything built so far is already removed.
func Build(opts Options) (*Lab, error) {
	if opts.Prefix == "" {
		opts.Prefix = "nftp-lab"
	}
	if opts.Clients == 0 {
		opts.Clients = 1
	}
	if opts.Pods == 0 {
		opts.Pods = 2
	}
	if opts.Ports == nil {
		opts.Ports = []PortSpec{Port(80)}
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Clients < 0 || opts.Clients > MaxClients || opts.Pods < 0 || opts.Pods > MaxPods {
		return nil, fmt.Errorf("lab: %d clients and %d pods, want 1..%d and 1..%d", opts.Clients, opts.Pods, MaxClients, MaxPods)
	}
	suffix, err := randomHex(2)
	if err != nil {
		return nil, err
	}
	l := &Lab{Prefix: opts.Prefix + "-" + suffix, logf: opts.Logf}
	if err := l.build(opts); err != nil {
		return nil, errors.Join(fmt.Errorf("lab %s: %w", l.Prefix, err), l.Close())
	}
	return l, nil
}

func (l *Lab) build(opts Options) error {
	start := time.Now()
	if err := l.createNamespaces(opts); err != nil {
		return err
	}
	if err := l.setSysctls(); err != nil {
		return err
	}
	if _, err := l.Node.RunStdin(l.nodeBatch(), "ip", "-batch", "-"); err != nil {
		return fmt.Errorf("wire node: %w", err)
	}
	hosts := append(append([]*Host{}, l.Clients...), l.Pods...)
	err := parallel(len(hosts)+1, func(i int) error {
		if i == len(hosts) {
			_, err := l.Gateway.RunStdin(gatewayBatch(), "ip", "-batch", "-")
			return err
		}
		_, err := hosts[i].NS.RunStdin(hostBatch(hosts[i]), "ip", "-batch", "-")
		return err
	})
	if err != nil {
		return fmt.Errorf("wire hosts: %w", err)
	}
	all := append([]*netns.NS{l.Node, l.Gateway}, namespaces(hosts)...)
	if err := parallel(len(all), func(i int) error { return waitAddresses(all[i]) }); err != nil {
		return err
	}
	for _, p := range l.Pods {
		s, err := Serve(p.NS, p.Name, []netip.Addr{p.IPv4, p.IPv6}, opts.Ports)
		if err != nil {
			return err
		}
		p.Server = s
	}
	l.logf("lab %s: node, gateway, %d clients, %d pods ready in %v (br_netfilter %v)", l.Prefix,
		len(l.Clients), len(l.Pods), time.Since(start).Round(time.Millisecond), l.BridgeNetfilter)
	return nil
}

// createNamespaces makes every namespace concurrently (each costs a few process starts) and
// records the ones that exist even when another fails, so Close can remove them.
func (l *Lab) createNamespaces(opts Options) error {
	l.Clients = make([]*Host, opts.Clients)
	for i := range l.Clients {
		n := i + 1
		l.Clients[i] = &Host{Name: fmt.Sprintf("client-%d", n), IPv4: ClientIPv4(n), IPv6: ClientIPv6(n),
			GatewayV4: ClientGatewayV4(n), GatewayV6: ClientGatewayV6(n), NodeLink: fmt.Sprintf("veth-client%d", n)}
	}
	l.Pods = make([]*Host, opts.Pods)
	for i := range l.Pods {
		n := i + 1
		l.Pods[i] = &Host{Name: fmt.Sprintf("pod-%d", n), IPv4: PodIPv4(n), IPv6: PodIPv6(n),
			GatewayV4: netip.MustParseAddr(PodGatewayV4), GatewayV6: netip.MustParseAddr(PodGatewayV6),
			NodeLink: fmt.Sprintf("veth-pod%d", n)}
	}
	// The node first and alone: the first `ip netns add` on a host sets up /run/netns, which
	// concurrent first calls could race on.
	var err error
	if l.Node, err = netns.Create(l.Prefix + "-node"); err != nil {
		return err
	}
	hosts := append(append([]*Host{}, l.Clients...), l.Pods...)
	nss := make([]*netns.NS, len(hosts)+1)
	err = parallel(len(nss), func(i int) error {
		name := "gw"
		if i < len(hosts) {
			name = hosts[i].Name
		}
		ns, err := netns.Create(l.Prefix + "-" + name)
		nss[i] = ns
		return err
	})
	for i, h := range hosts {
		h.NS = nss[i]
	}
	l.Gateway = nss[len(hosts)]
	return err
}

// setSysctls writes the namespace-local sysctls: forwarding on the node, no ICMP rate limit on
// the node (a test sending many probes that are rejected must see every refusal, not one per
// second), and no duplicate address detection anywhere, so IPv6 addresses are usable the moment
// they are added.
func (l *Lab) setSysctls() error {
	noDAD := map[string]string{
		"net/ipv6/conf/all/accept_dad":     "0",
		"net/ipv6/conf/default/accept_dad": "0",
	}
	node := map[string]string{
		"net/ipv4/ip_forward":              "1",
		"net/ipv6/conf/all/forwarding":     "1",
		"net/ipv6/conf/default/forwarding": "1",
		"net/ipv4/icmp_ratelimit":          "0",
		"net/ipv6/icmp/ratelimit":          "0",
	}
	for k, v := range noDAD {
		node[k] = v
	}
	all := append([]*netns.NS{l.Gateway}, namespaces(append(append([]*Host{}, l.Clients...), l.Pods...))...)
	return parallel(len(all)+1, func(i int) error {
		if i < len(all) {
			return writeSysctls(all[i], noDAD)
		}
		if err := writeSysctls(l.Node, node); err != nil {
			return err
		}
		var err error
		l.BridgeNetfilter, err = bridgeNetfilter(l.Node)
		return err
	})
}

// bridgeNetfilter turns on the namespace's bridge-nf-call sysctls when br_netfilter is loaded
// and reports whether it is.
func bridgeNetfilter(ns *netns.NS) (bool, error) {
	const dir = "/proc/sys/net/bridge"
	var on bool
	err := ns.Do(func() error {
		if _, err := os.Stat(path.Join(dir, "bridge-nf-call-iptables")); err != nil {
			return nil
		}
		on = true
		for _, k := range []string{"bridge-nf-call-iptables", "bridge-nf-call-ip6tables"} {
			if err := os.WriteFile(path.Join(dir, k), []byte("1"), 0o644); err != nil {
				return fmt.Errorf("sysctl %s in %s: %w", k, ns.Name, err)
			}
		}
		return nil
	})
	return on, err
}

// writeSysctls writes /proc/sys/net entries from a thread inside ns: the kernel resolves them
// against the writer's network namespace.
func writeSysctls(ns *netns.NS, kv map[string]string) error {
	return ns.Do(func() error {
		for k, v := range kv {
			if err := os.WriteFile(path.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
				return fmt.Errorf("sysctl %s=%s in %s: %w", k, v, ns.Name, err)
			}
		}
		return nil
	})
}

// nodeBatch is the node's `ip -batch` script: the bridge, the uplink, and the node end of every
// client and pod link (the other end is created straight into the peer's namespace). The bridge
// gets a fixed MAC so it does not change as ports join. Pod ports are in hairpin mode, as the
// kubelet sets them: with br_netfilter, a pod's packet DNAT'ed back to the same pod is bridged
// out of the port it came in on, which the bridge refuses otherwise.
func (l *Lab) nodeBatch() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("link add name %s address 02:00:c6:12:80:01 type bridge forward_delay 0", BridgeName)
	w("link set %s up", BridgeName)
	w("address add %s/24 dev %s", PodGatewayV4, BridgeName)
	w("address add %s/64 dev %s nodad", PodGatewayV6, BridgeName)
	w("link add name eth0 type veth peer name eth0 netns %s", l.Gateway.Name)
	w("link set eth0 up")
	w("address add %s/24 dev eth0", NodeIPv4)
	w("address add %s/64 dev eth0 nodad", NodeIPv6)
	w("route add default via %s", UplinkGatewayV4)
	w("route add ::/0 via %s", UplinkGatewayV6)
	for _, c := range l.Clients {
		w("link add name %s type veth peer name eth0 netns %s", c.NodeLink, c.NS.Name)
		w("link set %s up", c.NodeLink)
		w("address add %s/24 dev %s", c.GatewayV4, c.NodeLink)
		w("address add %s/64 dev %s nodad", c.GatewayV6, c.NodeLink)
	}
	for _, p := range l.Pods {
		w("link add name %s type veth peer name eth0 netns %s", p.NodeLink, p.NS.Name)
		w("link set %s master %s", p.NodeLink, BridgeName)
		w("link set %s type bridge_slave hairpin on", p.NodeLink)
		w("link set %s up", p.NodeLink)
	}
	return b.String()
}

func gatewayBatch() string {
	return fmt.Sprintf("link set eth0 up\naddress add %s/24 dev eth0\naddress add %s/64 dev eth0 nodad\n",
		UplinkGatewayV4, UplinkGatewayV6)
}

// hostBatch is a client's or pod's script: address the link, bring it up, route via the node.
func hostBatch(h *Host) string {
	return fmt.Sprintf("link set eth0 up\naddress add %s/24 dev eth0\naddress add %s/64 dev eth0 nodad\n"+
		"route add default via %s\nroute add ::/0 via %s\n", h.IPv4, h.IPv6, h.GatewayV4, h.GatewayV6)
}

// waitAddresses waits (bounded) until no IPv6 address in ns is tentative: a tentative address
// cannot be bound, and a link's addresses stay tentative until both ends of the veth are up.
func waitAddresses(ns *netns.NS) error {
	var out string
	for i := 0; i < 100; i++ {
		var err error
		out, err = ns.Run("ip", "-6", "-o", "address", "show", "tentative")
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) == "" {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("netns %s: addresses still tentative after 2s: %s", ns.Name, out)
}

// NodeIPs are every address of the node: the primary ones, its address on each client link and
// on the bridge. Each is local to the node, so each is a NodePort address by default.
func (l *Lab) NodeIPs() []netip.Addr {
	ips := []netip.Addr{netip.MustParseAddr(NodeIPv4), netip.MustParseAddr(NodeIPv6)}
	for _, c := range l.Clients {
		ips = append(ips, c.GatewayV4, c.GatewayV6)
	}
	return append(ips, netip.MustParseAddr(PodGatewayV4), netip.MustParseAddr(PodGatewayV6))
}

// Pod is pod-n (n from 1).
func (l *Lab) Pod(n int) *Host { return l.Pods[n-1] }

// Client is client-n (n from 1).
func (l *Lab) Client(n int) *Host { return l.Clients[n-1] }

// Close stops processes started in the node, stops the pods' servers and removes every
// namespace. It is safe to call twice.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	procs := l.procs
	l.mu.Unlock()
	var errs []error
	for _, p := range procs {
		_ = p.Stop() // an exit status from SIGTERM is not a teardown failure
	}
	hosts := append(append([]*Host{}, l.Clients...), l.Pods...)
	for _, h := range hosts {
		if h != nil && h.Server != nil {
			h.Server.Close()
		}
	}
	for _, ns := range append(namespaces(hosts), l.Gateway, l.Node) {
		if ns != nil {
			errs = append(errs, ns.Close())
		}
	}
	return errors.Join(errs...)
}

func namespaces(hosts []*Host) []*netns.NS {
	var out []*netns.NS
	for _, h := range hosts {
		if h != nil && h.NS != nil {
			out = append(out, h.NS)
		}
	}
	return out
}

// parallel runs fn(0..n-1) concurrently and joins their errors.
func parallel(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
