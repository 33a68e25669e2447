package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// testTimeout bounds every test's probes together, so a broken lab fails instead of hanging.
const testTimeout = time.Minute

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func hostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// TestDirectPaths proves routing without any nftables rule: every host reaches every pod through
// the node, and the pod sees the sender's real address.
func TestDirectPaths(t *testing.T) {
	l := New(t, Options{Clients: 2, Pods: 2})
	ctx := testContext(t)
	tests := []struct {
		name    string
		from    *netns.NS
		network string
		to      netip.Addr
		src     netip.Addr // the address the pod must see
		wantPod string
	}{
		{"client-1 to pod-1 tcp v4", l.Client(1).NS, "tcp", l.Pod(1).IPv4, l.Client(1).IPv4, "pod-1"},
		{"client-1 to pod-1 udp v4", l.Client(1).NS, "udp", l.Pod(1).IPv4, l.Client(1).IPv4, "pod-1"},
		{"client-1 to pod-2 tcp v6", l.Client(1).NS, "tcp", l.Pod(2).IPv6, l.Client(1).IPv6, "pod-2"},
		{"client-2 to pod-2 udp v6", l.Client(2).NS, "udp", l.Pod(2).IPv6, l.Client(2).IPv6, "pod-2"},
		{"pod-1 to pod-2 tcp v4", l.Pod(1).NS, "tcp", l.Pod(2).IPv4, l.Pod(1).IPv4, "pod-2"},
		{"pod-2 to pod-1 udp v6", l.Pod(2).NS, "udp", l.Pod(1).IPv6, l.Pod(2).IPv6, "pod-1"},
		{"node to pod-2 tcp v4", l.Node, "tcp", l.Pod(2).IPv4, netip.MustParseAddr(PodGatewayV4), "pod-2"},
		{"node to pod-1 udp v6", l.Node, "udp", l.Pod(1).IPv6, netip.MustParseAddr(PodGatewayV6), "pod-1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Dial(ctx, tt.from, tt.network, hostPort(tt.to, 80))
			if r.Outcome != Replied {
				t.Fatalf("got %v, want a reply from %s", r, tt.wantPod)
			}
			want := Reply{Pod: tt.wantPod, Proto: tt.network, Port: 80, To: tt.to,
				From: netip.AddrPortFrom(tt.src, r.Reply.From.Port())}
			if r.Reply != want {
				t.Errorf("got reply %v, want %v", r.Reply, want)
			}
		})
	}
}

// TestExtraSource proves a host can send from a second address and the pod sees that address.
func TestExtraSource(t *testing.T) {
	l := New(t, Options{Pods: 1})
	ctx := testContext(t)
	c := l.Client(1)
	tests := []struct {
		network string
		src     netip.Addr
		to      netip.Addr
	}{
		{"tcp", netip.MustParseAddr("198.18.1.3"), l.Pod(1).IPv4},
		{"udp", netip.MustParseAddr("fd00:1::3"), l.Pod(1).IPv6},
	}
	for _, tt := range tests {
		t.Run(tt.network+" from "+tt.src.String(), func(t *testing.T) {
			if err := c.AddAddress(tt.src); err != nil {
				t.Fatal(err)
			}
			r := Dialer{Source: tt.src}.Dial(ctx, c.NS, tt.network, hostPort(tt.to, 80))
			if r.Outcome != Replied || r.Reply.From.Addr() != tt.src {
				t.Errorf("got %v, want pod-1 seeing %s", r, tt.src)
			}
		})
	}
}

// TestSourcePort proves a probe can choose its source port (with or without an address) and
// the pod sees it.
func TestSourcePort(t *testing.T) {
	l := New(t, Options{Pods: 1})
	ctx := testContext(t)
	for i, network := range []string{"tcp", "udp"} {
		port := uint16(61001 + i)
		r := Dialer{SourcePort: port}.Dial(ctx, l.Client(1).NS, network, hostPort(l.Pod(1).IPv4, 80))
		if r.Outcome != Replied || r.Reply.From.Port() != port {
			t.Errorf("%s: got %v, want pod-1 seeing source port %d", network, r, port)
		}
	}
}

// TestFlowProbedAfterIdle proves a flow answers a probe sent after it sat idle for longer than
// the Dialer's Timeout: each probe is bounded by its own deadline, not by the last one's.
func TestFlowProbedAfterIdle(t *testing.T) {
	l := New(t, Options{Pods: 1})
	ctx := testContext(t)
	const timeout = 500 * time.Millisecond
	for _, network := range []string{"tcp", "udp"} {
		f := Dialer{Timeout: timeout}.Flow(l.Client(1).NS, network, hostPort(l.Pod(1).IPv4, 80))
		defer f.Close()
		for i := range 2 {
			if r := f.Probe(ctx); r.Outcome != Replied || r.Reply.Pod != "pod-1" {
				t.Errorf("%s, probe %d (the second after %s idle): got %v, want pod-1", network, i+1, 2*timeout, r)
			}
			time.Sleep(2 * timeout)
		}
	}
}

// TestNodeIPsReachable proves every node address answers a client: each is local to the node, a
// NodePort candidate. A node-local backend started with Serve stands in for a host-network pod.
func TestNodeIPsReachable(t *testing.T) {
	l := New(t, Options{Clients: 2, Pods: 1})
	ctx := testContext(t)
	s, err := Serve(l.Node, "node", l.NodeIPs(), []PortSpec{{Proto: "tcp", First: 30080}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if got := len(l.NodeIPs()); got != 8 {
		t.Errorf("got %d node IPs %v, want 8 (uplink, 2 client links, bridge; each v4 and v6)", got, l.NodeIPs())
	}
	for _, ip := range l.NodeIPs() {
		addr := hostPort(ip, 30080)
		t.Run(addr, func(t *testing.T) {
			r := l.Client(2).Dial(ctx, "tcp", addr)
			if r.Outcome != Replied || r.Reply.Pod != "node" || r.Reply.To != ip {
				t.Errorf("got %v, want the node answering on %s", r, ip)
			}
		})
	}
}

// TestClosedPort proves that the lab tells "refused" from "timeout" from "unreachable": a
// closed port answers with RST / ICMP port unreachable at once, an address the node has no
// neighbour for stays silent.
func TestClosedPort(t *testing.T) {
	l := New(t, Options{Pods: 1})
	ctx := testContext(t)
	d := Dialer{Timeout: time.Second}
	tests := []struct {
		name    string
		network string
		addr    string
		want    Outcome
	}{
		{"tcp v4 closed port", "tcp", hostPort(l.Pod(1).IPv4, 81), Refused},
		{"udp v4 closed port", "udp", hostPort(l.Pod(1).IPv4, 81), Refused},
		{"tcp v6 closed port", "tcp", hostPort(l.Pod(1).IPv6, 81), Refused},
		{"udp v6 closed port", "udp", hostPort(l.Pod(1).IPv6, 81), Refused},
		// No DNAT: the node routes the service address to its gateway, which drops it.
		{"tcp v4 service address without rules", "tcp", hostPort(ClusterIPv4(1), 80), Timeout},
		{"udp v6 service address without rules", "udp", hostPort(ClusterIPv6(1), 80), Timeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r := d.Dial(ctx, l.Client(1).NS, tt.network, tt.addr); r.Outcome != tt.want {
				t.Errorf("dial %s %s: got %v, want %v", tt.network, tt.addr, r, tt.want)
			}
		})
	}
}

// TestPortRangeBackends proves a pod answers on every port of a range with the port it arrived
// on, and only there.
func TestPortRangeBackends(t *testing.T) {
	l := New(t, Options{Pods: 1, Ports: []PortSpec{Port(80), PortRange(16384, 16387), {Proto: "udp", First: 5060}}})
	ctx := testContext(t)
	tests := []struct {
		network string
		port    uint16
		want    Outcome
	}{
		{"tcp", 16383, Refused},
		{"tcp", 16384, Replied},
		{"udp", 16385, Replied},
		{"tcp", 16387, Replied},
		{"udp", 16387, Replied},
		{"udp", 16388, Refused},
		{"udp", 5060, Replied},
		{"tcp", 5060, Refused},
	}
	for _, tt := range tests {
		for _, to := range []netip.Addr{l.Pod(1).IPv4, l.Pod(1).IPv6} {
			addr := hostPort(to, tt.port)
			t.Run(tt.network+" "+addr, func(t *testing.T) {
				r := l.Client(1).Dial(ctx, tt.network, addr)
				if r.Outcome != tt.want {
					t.Fatalf("got %v, want %v", r, tt.want)
				}
				if r.Outcome == Replied && (r.Reply.Port != tt.port || r.Reply.Proto != tt.network) {
					t.Errorf("got reply %v, want %s port %d", r.Reply, tt.network, tt.port)
				}
			})
		}
	}
}

// TestStartInNode proves a process runs in the node namespace, its output is collected, and
// Stop ends it.
func TestStartInNode(t *testing.T) {
	l := New(t, Options{Pods: 1})
	ctx := testContext(t)
	tests := []struct {
		name       string
		argv       []string
		wantOutput string
	}{
		// The node's own address proves which namespace the process runs in.
		{"sees the node's links", []string{"sh", "-c", "ip -o -4 address show dev cbr0; exec sleep 60"}, PodGatewayV4 + "/24"},
		{"keeps stderr", []string{"sh", "-c", "echo oops >&2; exec sleep 60"}, "oops"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := l.StartInNode(ctx, tt.argv...)
			if err != nil {
				t.Fatal(err)
			}
			deadline := time.After(10 * time.Second)
			for !strings.Contains(p.Output(), tt.wantOutput) {
				select {
				case <-deadline:
					t.Fatalf("output %q, want it to contain %q", p.Output(), tt.wantOutput)
				case <-p.Done():
					t.Fatalf("exited early (%v) with output %q, want it running", p.Err(), p.Output())
				case <-time.After(20 * time.Millisecond):
				}
			}
			if err := p.Stop(); err == nil {
				t.Errorf("Stop: got exit error nil, want the SIGTERM exit status")
			}
			select {
			case <-p.Done():
			default:
				t.Errorf("Done not closed after Stop")
			}
		})
	}
}

// TestStopWaitsForASlowExit: a process that takes longer than the grace period to exit after
// SIGTERM (as the daemon does on a busy machine) is logged as slow, not killed: Stop returns its
// own exit status.
func TestStopWaitsForASlowExit(t *testing.T) {
	netns.Skip(t)
	ns := netns.New(t, "labslow")
	var mu sync.Mutex
	var logs []string
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
	}
	slowExit := fmt.Sprintf("sleep %d; exit 0", int((stopGrace + time.Second).Seconds()))
	p, err := Start(context.Background(), ns, logf, "sh", "-c", `trap '`+slowExit+`' TERM; printf 'st%s\n' arted; while :; do sleep 0.1; done`)
	if err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(p.Output(), "started") { // bounded by the test's timeout
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop of a process slow to exit: %v, want its own exit status 0 (not killed)", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(logs, "\n"), "still running") {
		t.Errorf("the slow exit was not logged; logs:\n%s", strings.Join(logs, "\n"))
	}
}

// TestCloseRemovesEverything proves teardown leaves no namespace behind, also after a process
// was left running in the node.
func TestCloseRemovesEverything(t *testing.T) {
	netns.Skip(t)
	l, err := Build(Options{Clients: 2, Pods: 3})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartInNode(context.Background(), "sleep", "60"); err != nil {
		t.Errorf("start: %v", err)
	}
	if got := labNamespaces(t, l.Prefix); len(got) != 7 {
		t.Errorf("before Close: got namespaces %v, want 7 (node, gw, 2 clients, 3 pods)", got)
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if got := labNamespaces(t, l.Prefix); len(got) != 0 {
		t.Errorf("after Close: got namespaces %v, want none", got)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: got %v, want nil", err)
	}
}

func labNamespaces(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := netnsList()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if name, _, _ := strings.Cut(strings.TrimSpace(line), " "); strings.HasPrefix(name, prefix+"-") {
			got = append(got, name)
		}
	}
	return got
}

func netnsList() (string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	return string(out), err
}

// TestBuildFailureCleansUp proves a lab that fails half-way removes what it had built.
func TestBuildFailureCleansUp(t *testing.T) {
	netns.Skip(t)
	tests := []struct {
		name string
		opts Options
	}{
		{"too many pods", Options{Prefix: "nftp-labfail", Pods: MaxPods + 1}},
		{"bad protocol after wiring", Options{Prefix: "nftp-labfail", Ports: []PortSpec{{Proto: "sctp", First: 80}}}},
		{"empty range after wiring", Options{Prefix: "nftp-labfail", Ports: []PortSpec{{First: 90, Last: 80}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := Build(tt.opts)
			if err == nil {
				l.Close()
				t.Fatalf("Build(%+v): got no error, want one", tt.opts)
			}
			if got := labNamespaces(t, tt.opts.Prefix); len(got) != 0 {
				t.Errorf("after failed Build (%v): got namespaces %v, want none", err, got)
			}
		})
	}
}
