package explain

import (
	"bytes"
	"errors"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/nft/trace"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// Address plan: node 198.18.1.1, pods 198.18.128.0/24 (the cluster CIDR), Service addresses
// 198.19.0.0/18, a LoadBalancer IP 198.19.100.1, an allowed source range 198.18.5.0/24.
var (
	nodeIP  = netip.MustParseAddr("198.18.1.1")
	podCIDR = netip.MustParsePrefix("198.18.128.0/24")
	pod     = netip.MustParseAddr("198.18.128.50")
	allowed = netip.MustParseAddr("198.18.5.7")
)

func a(s string) netip.Addr { return netip.MustParseAddr(s) }

func port(ns, name, pname string, p uint16, eps ...string) model.ServicePort {
	sp := model.ServicePort{Name: model.PortName{Service: model.ServiceKey{Namespace: ns, Name: name}, Port: pname, Protocol: model.TCP},
		Port: p, PortEnd: p, TargetPort: 8080}
	for _, e := range eps {
		sp.Endpoints = append(sp.Endpoints, model.Endpoint{Addr: a(e), Port: 8080, Ready: true, Serving: true}.At("node-a", ""))
	}
	return sp
}

func svc(sp model.ServicePort, edit func(*model.ServicePort)) *model.Service {
	edit(&sp)
	return &model.Service{Key: sp.Name.Service, Ports: []model.ServicePort{sp}}
}

// testNode is one node's IPv4 table built by the ruleset builder from: web (ClusterIP, three
// endpoints), np (NodePort 30080), lb (LoadBalancer IP with source ranges), empty (no
// endpoints); and the daemon's rejection of bad.
func testNode(t *testing.T) *Node {
	t.Helper()
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000,
		ClusterCIDRs: []netip.Prefix{podCIDR}, ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/18")}, NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	services := []*model.Service{
		svc(port("default", "web", "http", 80, "198.18.128.10", "198.18.128.11", "198.18.128.12"), func(sp *model.ServicePort) {
			sp.ClusterIPs = []netip.Addr{a("198.19.0.10")}
		}),
		svc(port("default", "np", "http", 80, "198.18.128.13"), func(sp *model.ServicePort) {
			sp.ClusterIPs, sp.NodePort, sp.NodePortEnd = []netip.Addr{a("198.19.0.11")}, 30080, 30080
		}),
		svc(port("default", "lb", "http", 80, "198.18.128.14"), func(sp *model.ServicePort) {
			sp.ClusterIPs, sp.LoadBalancerIPs = []netip.Addr{a("198.19.0.12")}, []netip.Addr{a("198.19.100.1")}
			sp.LoadBalancerSourceRanges = []netip.Prefix{netip.MustParsePrefix("198.18.5.0/24")}
		}),
		svc(port("default", "empty", "http", 80), func(sp *model.ServicePort) { sp.ClusterIPs = []netip.Addr{a("198.19.0.13")} }),
		svc(port("default", "any", "", 0, "198.18.128.15"), func(sp *model.ServicePort) {
			sp.AllPorts, sp.TargetPort, sp.ClusterIPs, sp.Endpoints[0].Port = true, 0, []netip.Addr{a("198.19.0.14")}, 0
		}),
	}
	rs := b.Ruleset(&model.Node{Name: "node-a", Addresses: []netip.Addr{nodeIP}}, services)
	return &Node{Tables: []*nft.Ruleset{rs}, Addrs: []netip.Addr{nodeIP},
		Rejections: []Rejection{{Service: "default/bad", Reason: model.ReasonAnnotationSyntax, Message: "nftproxy.io/port-ranges: bad"}}}
}

func tcp(n *Node, src netip.Addr, dst string, p uint16) Answer {
	return n.Explain(n.Packet(src, a(dst), unix.IPPROTO_TCP, p))
}

func text(n *Node, ans Answer) string {
	var b bytes.Buffer
	n.WriteAnswer(&b, ans, "")
	return b.String()
}

func TestExplain(t *testing.T) {
	n := testNode(t)
	t.Run("ClusterIP: its port, each endpoint a third, pods not masqueraded", func(t *testing.T) {
		ans := tcp(n, pod, "198.19.0.10", 80)
		if ans.Err != nil || ans.Port != "default/web/tcp/http" || ans.Frontend != "ClusterIP" || ans.Outcome.Masquerade {
			t.Fatalf("got %+v\n%s", ans, text(n, ans))
		}
		if len(ans.Spread) != 3 {
			t.Fatalf("spread %v, want 3 endpoints", ans.Spread)
		}
		for d, p := range ans.Spread {
			if math.Abs(p-1.0/3) > 1e-9 {
				t.Errorf("%s: %.3f, want 1/3", d, p)
			}
		}
		if !strings.Contains(text(n, ans), "198.18.128.11:8080                        33.3%") {
			t.Errorf("text does not list the endpoint's share:\n%s", text(n, ans))
		}
	})
	t.Run("ClusterIP from outside: masqueraded, and the rule that asked for it named", func(t *testing.T) {
		ans := tcp(n, netip.Addr{}, "198.19.0.10", 80)
		if !ans.Outcome.Masquerade || len(ans.Masquerade) != 1 || !strings.Contains(ans.Masquerade[0], "from outside the cluster") {
			t.Fatalf("masquerade %v (%v), want the services rule\n%s", ans.Outcome.Masquerade, ans.Masquerade, text(n, ans))
		}
	})
	t.Run("NodePort: masqueraded, its endpoint", func(t *testing.T) {
		ans := tcp(n, netip.Addr{}, nodeIP.String(), 30080)
		if ans.Port != "default/np/tcp/http" || ans.Frontend != "node port" || !ans.Outcome.Masquerade ||
			!slices.Equal(ans.Outcome.DNAT, []string{"198.18.128.13:8080"}) {
			t.Fatalf("got %+v\n%s", ans, text(n, ans))
		}
	})
	t.Run("source ranges: an allowed source reaches the endpoint, another is dropped and told why", func(t *testing.T) {
		ok := tcp(n, allowed, "198.19.100.1", 80)
		if ok.Outcome.Verdict != trace.Accept || len(ok.Outcome.DNAT) != 1 || len(ok.Reasons) != 0 {
			t.Fatalf("allowed source: %+v\n%s", ok, text(n, ok))
		}
		no := tcp(n, netip.Addr{}, "198.19.100.1", 80)
		if no.Outcome.Verdict != trace.Drop || no.Port != "default/lb/tcp/http" || len(no.Reasons) == 0 ||
			!strings.Contains(strings.Join(no.Reasons, "\n"), "source outside loadBalancerSourceRanges") {
			t.Fatalf("refused source: %+v\n%s", no, text(n, no))
		}
	})
	t.Run("no endpoints: rejected with a reset, the Service named", func(t *testing.T) {
		ans := tcp(n, pod, "198.19.0.13", 80)
		if ans.Outcome.Verdict != trace.RejectTCPReset || len(ans.Reasons) != 1 || !strings.Contains(ans.Reasons[0], "default/empty/tcp/http has no endpoints") {
			t.Fatalf("got %+v\n%s", ans, text(n, ans))
		}
	})
	t.Run("undefined port of a ClusterIP: rejected, said so", func(t *testing.T) {
		ans := tcp(n, pod, "198.19.0.10", 81)
		if ans.Outcome.Verdict != trace.RejectICMP && ans.Outcome.Verdict != trace.RejectTCPReset || len(ans.Reasons) != 1 ||
			!strings.Contains(ans.Reasons[0], "no Service has port tcp/81") {
			t.Fatalf("got %+v\n%s", ans, text(n, ans))
		}
	})
	t.Run("an unallocated Service address: dropped, with the rule; the rejections listed", func(t *testing.T) {
		ans := tcp(n, pod, "198.19.0.99", 80)
		out := text(n, ans)
		if ans.Outcome.Verdict != trace.Drop || !strings.Contains(out, "unallocated Service addresses") || !strings.Contains(out, "default/bad (AnnotationSyntax)") ||
			strings.Contains(out, "no Service has port") {
			t.Fatalf("got %+v\n%s", ans, out)
		}
	})
}

func TestService(t *testing.T) {
	n := testNode(t)
	var b bytes.Buffer
	n.WriteService(&b, n.Service("default/any", pod))
	if out := b.String(); !strings.Contains(out, "(ClusterIP, all-ports; every port of the protocol goes the same way)") ||
		!strings.Contains(out, "100.0% (on the packet's own port)") {
		t.Fatalf("all-ports Service:\n%s", out)
	}
	b.Reset()
	s := n.Service("default/np", netip.Addr{})
	if len(s.Frontends) != 2 || len(s.Rejections) != 0 {
		t.Fatalf("np: %d frontends (want the ClusterIP and the node port), rejections %v", len(s.Frontends), s.Rejections)
	}
	s = n.Service("default/bad", netip.Addr{})
	n.WriteService(&b, s)
	if len(s.Rejections) != 1 || len(s.Frontends) != 0 || !strings.Contains(b.String(), "not programmed: rejected (AnnotationSyntax): nftproxy.io/port-ranges: bad") {
		t.Fatalf("bad: %+v\n%s", s, b.String())
	}
	n.RejectionsErr, n.Rejections = errors.New("connection refused"), nil
	b.Reset()
	n.WriteService(&b, n.Service("default/gone", netip.Addr{}))
	if out := b.String(); !strings.Contains(out, "nothing in the kernel") || !strings.Contains(out, "connection refused") {
		t.Fatalf("unknown Service, rejections unreadable:\n%s", out)
	}
}

func TestParseDestination(t *testing.T) {
	for _, c := range []struct {
		in    string
		addr  string
		proto uint8
		port  uint16
	}{{"198.19.0.10:80/tcp", "198.19.0.10", unix.IPPROTO_TCP, 80}, {"[fd00::10]:53/udp", "fd00::10", unix.IPPROTO_UDP, 53}, {"198.19.0.10:80", "198.19.0.10", unix.IPPROTO_TCP, 80}} {
		ad, pr, po, err := ParseDestination(c.in)
		if err != nil || ad != a(c.addr) || pr != c.proto || po != c.port {
			t.Errorf("%s: %v %d %d %v", c.in, ad, pr, po, err)
		}
	}
	for _, bad := range []string{"198.19.0.10/tcp", "198.19.0.10:0/tcp", "198.19.0.10:80/icmp"} {
		if _, _, _, err := ParseDestination(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// A node port the kernel holds with no node address to reach it on (no Node object) is noted,
// not silently left out.
func TestServiceNodePortWithoutAddress(t *testing.T) {
	n := testNode(t)
	n.Tables[0].Elements[ruleset.SetNodePortIPs] = nil
	s := n.Service("default/np", netip.Addr{})
	if len(s.Frontends) != 1 || len(s.Notes) != 1 || !strings.Contains(s.Notes[0], "node port tcp/30080 (ip): no ip node address accepts node ports") {
		t.Fatalf("frontends %d, notes %q; want the ClusterIP traced and the node port noted", len(s.Frontends), s.Notes)
	}
}

// A pod reaching itself through a Service is masqueraded by the hairpin rule, with no mark:
// that rule is named.
func TestHairpinMasqueradeNamed(t *testing.T) {
	n := testNode(t)
	ans := tcp(n, a("198.18.128.13"), "198.19.0.11", 80) // np's only endpoint
	if !ans.Outcome.Masquerade || len(ans.Masquerade) != 1 || !strings.Contains(ans.Masquerade[0], "hairpin") {
		t.Fatalf("masquerade %v %q, want the hairpin rule named\n%s", ans.Outcome.Masquerade, ans.Masquerade, text(n, ans))
	}
}
