package e2e

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// explainNodePort is np's node port (explicit, so the test can name it).
const explainNodePort = 30531

// explainServices are one Service per question explain answers: a ClusterIP with three
// endpoints, a NodePort, a LoadBalancer IP open to client-1's link only, a Service without
// endpoints, one the daemon rejects (its range ends before it starts), and np2, which asks for
// np's node port and is served without it.
func explainServices() []fixture.Service {
	http := []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}}
	no := false
	return []fixture.Service{
		{Name: "web", ClusterIPs: []netip.Addr{lab.ClusterIPv4(40), lab.ClusterIPv6(40)}, Ports: http, Endpoints: fixture.Pods(1, 2, 3)},
		{Name: "np", Type: "NodePort", ClusterIPs: []netip.Addr{lab.ClusterIPv4(41)},
			Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080, NodePort: explainNodePort}}, Endpoints: fixture.Pods(1)},
		{Name: "lb", Type: "LoadBalancer", ClusterIPs: []netip.Addr{lab.ClusterIPv4(42)}, Ports: http, AllocateNodePorts: &no,
			LoadBalancerIPs: []netip.Addr{lab.LoadBalancerIPv4(40)}, SourceRanges: []string{"198.18.1.0/24"}, Endpoints: fixture.Pods(2)},
		{Name: "np2", Type: "NodePort", ClusterIPs: []netip.Addr{lab.ClusterIPv4(45)},
			Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080, NodePort: explainNodePort}}, Endpoints: fixture.Pods(1)},
		{Name: "empty", ClusterIPs: []netip.Addr{lab.ClusterIPv4(43)}, Ports: http},
		{Name: "bad", ClusterIPs: []netip.Addr{lab.ClusterIPv4(44)}, Ports: []fixture.Port{{Name: "rtp", Protocol: "UDP", Port: 5000}},
			Annotations: map[string]string{"nftproxy.io/port-ranges": "rtp=5000-4000"}, Endpoints: fixture.Pods(1)},
	}
}

// explain runs `nftproxy explain args...` in the node, where the daemon runs.
func (e *env) explain(args ...string) string {
	e.t.Helper()
	out, err := e.lab.Node.Run(append([]string{daemonBinary, "explain"}, args...)...)
	if err != nil {
		e.t.Fatalf("nftproxy explain %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	e.t.Logf("nftproxy explain %s:\n%s", strings.Join(args, " "), out)
	return out
}

// has fails the test unless out holds every line fragment of want.
func has(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: the answer lacks %q:\n%s", what, w, out)
		}
	}
}

// TestExplain: `nftproxy explain` on a node the real daemon programmed answers from the kernel's
// tables, and what it says is what packets do: the ClusterIP's endpoints each take a third, the
// NodePort is masqueraded, the source range lets client-1 in and drops client-2 (both proven by
// a connection), a Service without endpoints is rejected, and the rejected Service is named with
// the daemon's reason (read from its /rejections), and so is a Service served without the node
// port it asked for.
func TestExplain(t *testing.T) {
	t.Parallel()
	svcs := explainServices()
	e := newEnv(t, lab.Options{Pods: 3, Clients: 2, Ports: []lab.PortSpec{lab.Port(8080)}}, svcs...)
	e.flags = []string{"--metrics-bind-address", "127.0.0.1:10249"}
	e.start(svcs[:5]...)

	t.Run("ClusterIP: its endpoints, a third each, in both families", func(t *testing.T) {
		out := e.explain("default/web")
		has(t, "explain default/web", out, "service port: default/web/tcp/http (ClusterIP)", "verdict: accepted: DNATed to an endpoint",
			"-> "+lab.ClusterIPv4(40).String()+":80, table ip nftproxy", "-> ["+lab.ClusterIPv6(40).String()+"]:80, table ip6 nftproxy")
		for _, n := range []int{1, 2, 3} {
			for _, ep := range []string{lab.PodIPv4(n).String() + ":8080", "[" + lab.PodIPv6(n).String() + "]:8080"} {
				if !regexp.MustCompile(regexp.QuoteMeta(ep) + ` +33\.3%`).MatchString(out) {
					t.Errorf("explain default/web: %s not listed with 33.3%%:\n%s", ep, out)
				}
			}
		}
	})
	t.Run("NodePort from a client: masqueraded, to its endpoint", func(t *testing.T) {
		client := e.lab.Client(1)
		out := e.explain("--from", client.IPv4.String(), fmt.Sprintf("%s:%d/tcp", lab.NodeIPv4, explainNodePort))
		has(t, "explain the node port", out, "service port: default/np/tcp/http (node port)", "masquerade: yes",
			lab.PodIPv4(1).String()+":8080", "100.0%")
		if r := client.Dial(e.ctx, "tcp", hostPort(netip.MustParseAddr(lab.NodeIPv4), explainNodePort)); r.Outcome != lab.Replied || r.Reply.From.Addr() == client.IPv4 {
			t.Errorf("the node port from client-1: %v; want a reply that saw the node's address (masqueraded)", r)
		}
	})
	t.Run("source ranges: client-1 allowed, client-2 dropped and told why", func(t *testing.T) {
		lbAddr := lab.LoadBalancerIPv4(40)
		dst := lbAddr.String() + ":80/tcp"
		ok := e.explain("--from", e.lab.Client(1).IPv4.String(), dst)
		has(t, "explain the LoadBalancer IP from client-1", ok, "service port: default/lb/tcp/http", "verdict: accepted: DNATed", lab.PodIPv4(2).String()+":8080")
		no := e.explain("--from", e.lab.Client(2).IPv4.String(), dst)
		has(t, "explain the LoadBalancer IP from client-2", no, "service port: default/lb/tcp/http", "verdict: dropped",
			"source outside loadBalancerSourceRanges")
		if r := e.lab.Client(1).Dial(e.ctx, "tcp", hostPort(lbAddr, 80)); r.Outcome != lab.Replied {
			t.Errorf("client-1 to the LoadBalancer IP: %v; want a reply, as explain says", r)
		}
		if r := e.lab.Client(2).Dial(e.ctx, "tcp", hostPort(lbAddr, 80)); r.Outcome != lab.Timeout {
			t.Errorf("client-2 to the LoadBalancer IP: %v; want a timeout (dropped), as explain says", r)
		}
	})
	t.Run("no endpoints: rejected", func(t *testing.T) {
		out := e.explain("default/empty")
		has(t, "explain default/empty", out, "verdict: rejected with a TCP reset", "default/empty/tcp/http has no endpoints: rejected")
	})
	t.Run("rejected Service: named with the daemon's reason", func(t *testing.T) {
		out := e.explain("default/bad")
		has(t, "explain default/bad", out, "not programmed: rejected ("+model.ReasonRangeEndBeforeStart+")")
		part := e.explain("default/np2")
		has(t, "explain default/np2", part, "programmed in part: the rest is rejected ("+model.ReasonNodePortNotAssigned+")",
			"service port: default/np2/tcp/http (ClusterIP)")
		if strings.Contains(part, "(node port)") {
			t.Errorf("explain default/np2 shows a node port; np holds it:\n%s", part)
		}
		to := e.explain(lab.ClusterIPv4(44).String() + ":5000/udp")
		has(t, "explain the rejected Service's address", to, "service port: none",
			"default/bad ("+model.ReasonRangeEndBeforeStart+")")
	})
}
