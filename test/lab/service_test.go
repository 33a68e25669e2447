package lab

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// handDNAT is a minimal stand-in for nftproxy: a ClusterIP and its IPv6 twin DNAT'ed to pod-1
// (port 80) and spread over both pods (port 8080), for traffic arriving from outside
// (prerouting) and traffic the node itself sends (output).
const handDNAT = `
table ip labtest {
	chain services {
		ip daddr 198.19.0.1 meta l4proto { tcp, udp } th dport 80 dnat to 198.18.128.11
		ip daddr 198.19.0.1 meta l4proto { tcp, udp } th dport 8080 dnat to numgen random mod 2 map { 0 : 198.18.128.11, 1 : 198.18.128.12 }
	}
	chain prerouting { type nat hook prerouting priority dstnat; jump services; }
	chain output { type nat hook output priority -100; jump services; }
}
table ip6 labtest {
	chain services {
		ip6 daddr fd00:19::1 meta l4proto { tcp, udp } th dport 80 dnat to fd00:128::11
		ip6 daddr fd00:19::1 meta l4proto { tcp, udp } th dport 8080 dnat to numgen random mod 2 map { 0 : fd00:128::11, 1 : fd00:128::12 }
	}
	chain prerouting { type nat hook prerouting priority dstnat; jump services; }
	chain output { type nat hook output priority -100; jump services; }
}
`

// TestServiceDNAT proves the lab routes service traffic: with a hand-written DNAT in the node,
// clients and the node reach pods via a ClusterIP, replies find their way back through
// conntrack, the pod sees the client's real address, and conntrack shows the translation.
func TestServiceDNAT(t *testing.T) {
	l := New(t, Options{Pods: 2, Ports: []PortSpec{Port(80), Port(8080)}})
	ctx := testContext(t)
	if err := l.NftApply(handDNAT); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		from    *netns.NS
		network string
		addr    string
		src     netip.Addr
	}{
		{"client tcp v4", l.Client(1).NS, "tcp", hostPort(ClusterIPv4(1), 80), l.Client(1).IPv4},
		{"client udp v4", l.Client(1).NS, "udp", hostPort(ClusterIPv4(1), 80), l.Client(1).IPv4},
		{"client tcp v6", l.Client(1).NS, "tcp", hostPort(ClusterIPv6(1), 80), l.Client(1).IPv6},
		{"client udp v6", l.Client(1).NS, "udp", hostPort(ClusterIPv6(1), 80), l.Client(1).IPv6},
		{"pod-2 tcp v4", l.Pod(2).NS, "tcp", hostPort(ClusterIPv4(1), 80), l.Pod(2).IPv4},
		// The node picks its source before DNAT, from the route to the service address: the
		// default route, so the primary node IP.
		{"node tcp v4", l.Node, "tcp", hostPort(ClusterIPv4(1), 80), netip.MustParseAddr(NodeIPv4)},
		{"node udp v6", l.Node, "udp", hostPort(ClusterIPv6(1), 80), netip.MustParseAddr(NodeIPv6)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Dial(ctx, tt.from, tt.network, tt.addr)
			if r.Outcome != Replied {
				t.Fatalf("got %v, want a reply from pod-1", r)
			}
			if r.Reply.Pod != "pod-1" || r.Reply.From.Addr() != tt.src || r.Reply.Port != 80 {
				t.Errorf("got reply %v, want pod-1 port 80 seeing %s", r.Reply, tt.src)
			}
		})
	}

	t.Run("conntrack shows the translation", func(t *testing.T) {
		out, err := l.Conntrack("-p", "tcp", "--orig-dst", ClusterIPv4(1).String())
		if err != nil {
			t.Fatal(err)
		}
		want := "src=" + PodIPv4(1).String()
		if !strings.Contains(out, want) {
			t.Errorf("conntrack entries for %s:\n%s\nwant a reply direction containing %q", ClusterIPv4(1), out, want)
		}
	})

	for _, network := range []string{"tcp", "udp"} {
		for _, vip := range []netip.Addr{ClusterIPv4(1), ClusterIPv6(1)} {
			addr := hostPort(vip, 8080)
			t.Run("spread "+network+" "+addr, func(t *testing.T) {
				const n = 40
				got := l.Client(1).Spread(ctx, network, addr, n)
				if got.Outcomes[Replied] != n || got.Pods["pod-1"] == 0 || got.Pods["pod-2"] == 0 {
					t.Errorf("got %v (errors %v), want %d replies from both pod-1 and pod-2", got, got.Errors, n)
				}
			})
		}
	}
}

// oneBackend DNATs ClusterIP 198.19.0.2 port 80 (TCP and UDP) to one pod; %s is the pod.
const oneBackend = `
table ip labflow {
	chain prerouting {
		type nat hook prerouting priority dstnat;
		ip daddr 198.19.0.2 meta l4proto { tcp, udp } th dport 80 dnat to %s
	}
}
`

// TestFlowFollowsConntrack proves a Flow keeps its 5-tuple: after the DNAT target changes, an
// existing flow still reaches the old pod through its conntrack entry, a new connection reaches
// the new pod, and once the entry is deleted the UDP flow moves too. This is the shape of the
// stale-UDP-conntrack and connection-survival tests.
func TestFlowFollowsConntrack(t *testing.T) {
	l := New(t, Options{Pods: 2})
	ctx := testContext(t)
	vip := hostPort(ClusterIPv4(2), 80)
	for _, network := range []string{"tcp", "udp"} {
		t.Run(network, func(t *testing.T) {
			if err := l.NftApply(fmt.Sprintf(oneBackend, PodIPv4(1))); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = l.Nft("delete", "table", "ip", "labflow") })
			f := NewFlow(l.Client(1).NS, network, vip)
			defer f.Close()
			probe := func(step string, want string) {
				t.Helper()
				if r := f.Probe(ctx); r.Outcome != Replied || r.Reply.Pod != want {
					t.Fatalf("%s: flow probe got %v, want a reply from %s", step, r, want)
				}
			}
			probe("before the change", "pod-1")
			if err := l.NftApply(fmt.Sprintf("delete table ip labflow\n"+oneBackend, PodIPv4(2))); err != nil {
				t.Fatal(err)
			}
			probe("existing flow after the change", "pod-1")
			if r := l.Client(1).Dial(ctx, network, vip); r.Outcome != Replied || r.Reply.Pod != "pod-2" {
				t.Fatalf("new connection got %v, want a reply from pod-2", r)
			}
			if network == "tcp" {
				return // deleting a TCP entry would break the connection, not move it
			}
			src := f.Local()
			if _, err := l.Node.Run("conntrack", "-D", "-p", "udp", "--orig-src", src.Addr().String(),
				"--orig-port-src", fmt.Sprint(src.Port())); err != nil {
				t.Fatal(err)
			}
			probe("existing flow after conntrack -D", "pod-2")
		})
	}
}

// TestHairpin proves a pod reaching itself through a service depends on masquerade, as on a
// real node: without it the reply short-cuts inside the pod and the connection never
// completes; with it the pod sees the bridge address.
func TestHairpin(t *testing.T) {
	l := New(t, Options{Pods: 1})
	ctx := testContext(t)
	if err := l.NftApply(fmt.Sprintf(oneBackend, PodIPv4(1))); err != nil {
		t.Fatal(err)
	}
	vip := hostPort(ClusterIPv4(2), 80)
	d := Dialer{Timeout: time.Second}
	if r := d.Dial(ctx, l.Pod(1).NS, "tcp", vip); r.Outcome != Timeout {
		t.Errorf("hairpin without masquerade: got %v, want %v", r, Timeout)
	}
	masq := `table ip labflow {
	chain postrouting {
		type nat hook postrouting priority srcnat;
		ct status dnat ip saddr 198.18.128.0/24 ip daddr 198.18.128.0/24 masquerade
	}
}`
	if err := l.NftApply(masq); err != nil {
		t.Fatal(err)
	}
	r := d.Dial(ctx, l.Pod(1).NS, "tcp", vip)
	if r.Outcome != Replied || r.Reply.Pod != "pod-1" || r.Reply.From.Addr() != netip.MustParseAddr(PodGatewayV4) {
		t.Errorf("hairpin with masquerade: got %v, want pod-1 seeing %s", r, PodGatewayV4)
	}
}

// verdicts answers probes to ClusterIP 198.19.0.3 / fd00:19::3 with every kind of refusal the
// daemon's rules produce, by destination port, in forward (client traffic) and output (node
// traffic).
const verdicts = `
table inet labverdicts {
	chain verdicts {
		tcp dport 1 reject with tcp reset
		udp dport 2 reject
		tcp dport 3 reject with icmpx type host-unreachable
		meta l4proto { tcp, udp } th dport 4 drop
		udp dport 5 reject with icmpx type admin-prohibited
	}
	chain forward {
		type filter hook forward priority filter;
		ip daddr 198.19.0.3 jump verdicts
		ip6 daddr fd00:19::3 jump verdicts
	}
	chain output {
		type filter hook output priority filter;
		ip daddr 198.19.0.3 jump verdicts
		ip6 daddr fd00:19::3 jump verdicts
	}
}
`

// TestOutcomes proves each refusal is classified as a test expects it: a reset or port
// unreachable is Refused, other ICMP errors and local output drops are Unreachable, silent drops
// are Timeout.
func TestOutcomes(t *testing.T) {
	l := New(t, Options{Pods: 1, Ports: []PortSpec{}})
	ctx := testContext(t)
	if err := l.NftApply(verdicts); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		network string
		port    uint16
		client  Outcome
		node    Outcome
	}{
		{"tcp", 1, Refused, Refused},
		{"udp", 2, Refused, Refused},
		{"tcp", 3, Unreachable, Unreachable},
		{"tcp", 4, Timeout, Timeout},     // TCP retransmits a SYN its own output dropped
		{"udp", 4, Timeout, Unreachable}, // a datagram dropped in output fails the send (EPERM)
		{"udp", 5, Unreachable, Unreachable},
	}
	for _, tt := range tests {
		for _, vip := range []netip.Addr{ClusterIPv4(3), ClusterIPv6(3)} {
			addr := hostPort(vip, tt.port)
			// Parallel: the silent cases each wait for the whole default timeout, which TCP
			// needs (see Dialer.Timeout).
			t.Run("client "+tt.network+" "+addr, func(t *testing.T) {
				t.Parallel()
				if r := Dial(ctx, l.Client(1).NS, tt.network, addr); r.Outcome != tt.client {
					t.Errorf("got %v, want %v", r, tt.client)
				}
			})
			t.Run("node "+tt.network+" "+addr, func(t *testing.T) {
				t.Parallel()
				if r := Dial(ctx, l.Node, tt.network, addr); r.Outcome != tt.node {
					t.Errorf("got %v, want %v", r, tt.node)
				}
			})
		}
	}
}
