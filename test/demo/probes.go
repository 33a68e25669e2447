package main

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

// The example Services' addresses and ports (deploy/examples), on the lab's address plan.
const (
	webPort      = 80
	webTarget    = 8080
	webNodePort  = 30080
	rtpFirst     = 16384
	rtpLast      = 16393
	spreadProbes = 16 // connections per spread row: a 2-pod spread misses a pod with p = 2^-15
)

var (
	webIPv4     = lab.ClusterIPv4(10)
	webIPv6     = lab.ClusterIPv6(10)
	rtpIP       = lab.ClusterIPv4(11)
	anyportIP   = lab.ClusterIPv4(12)
	anyportLBIP = lab.LoadBalancerIPv4(1)
	unallocated = lab.ClusterIPv4(99) // in the service CIDR, owned by no Service
	nodeIPv4    = netip.MustParseAddr(lab.NodeIPv4)
	nodeIPv6    = netip.MustParseAddr(lab.NodeIPv6)
	bridgeIPv4  = netip.MustParseAddr(lab.PodGatewayV4) // what a masqueraded packet comes from
	bridgeIPv6  = netip.MustParseAddr(lab.PodGatewayV6)
)

// probe is one row of the table: n connections (or UDP exchanges) from one host to one
// address, and what the examples promise for them.
type probe struct {
	section string // printed above the first row of a new section
	from    string
	ns      *netns.NS
	network string
	to      netip.AddrPort
	n       int
	want    expect
	why     string // the promise, in a few words
	skip    string // why the probe is not run here (it is then not counted)
}

// expect is what a probe must produce.
type expect struct {
	outcome lab.Outcome
	// pods are the pods allowed to answer; each must answer at least once.
	pods []string
	// port is the port the pod must see the packet arrive on; 0 means the probed port.
	port uint16
	// saw is the source address each pod must see (after any masquerade).
	saw map[string]netip.Addr
}

func replied(saw map[string]netip.Addr, port uint16) expect {
	pods := make([]string, 0, len(saw))
	for p := range saw {
		pods = append(pods, p)
	}
	sort.Strings(pods)
	return expect{outcome: lab.Replied, pods: pods, port: port, saw: saw}
}

func refused() expect { return expect{outcome: lab.Refused} }

// probes lists the traffic the demo sends.
func (d *demo) probes() []probe {
	l := d.lab
	client, pod1, node := l.Client(1), l.Pod(1), l.Node
	ap := netip.AddrPortFrom
	both := func(a netip.Addr) map[string]netip.Addr { return map[string]netip.Addr{"pod-1": a, "pod-2": a} }
	only := func(pod string, a netip.Addr) map[string]netip.Addr { return map[string]netip.Addr{pod: a} }

	var ps []probe
	add := func(p probe) {
		if p.n == 0 {
			p.n = 1
		}
		ps = append(ps, p)
	}
	const masq = "masqueraded: from outside the cluster CIDR"

	s := "web: NodePort, dual-stack, 80 -> 8080 on pod-1 and pod-2"
	add(probe{section: s, from: client.Name, ns: client.NS, network: "tcp", to: ap(webIPv4, webPort), n: spreadProbes,
		want: replied(both(bridgeIPv4), webTarget), why: "spread over both pods, " + masq})
	podRow := probe{from: pod1.Name, ns: pod1.NS, network: "tcp", to: ap(webIPv4, webPort), n: spreadProbes,
		want: replied(map[string]netip.Addr{"pod-1": bridgeIPv4, "pod-2": pod1.IPv4}, webTarget),
		why:  "pod-2 sees pod-1 itself; pod-1 reaching itself is hairpin-masqueraded"}
	if !l.BridgeNetfilter {
		podRow.skip = "skipped: br_netfilter is not loaded (pod-to-pod replies would bypass conntrack, as on any node without it)"
	}
	add(podRow)
	add(probe{from: "node", ns: node, network: "tcp", to: ap(webIPv4, webPort), n: 4,
		want: expect{outcome: lab.Replied, pods: nil, port: webTarget, saw: both(bridgeIPv4)},
		why:  "the node's own traffic, " + masq})
	add(probe{from: client.Name, ns: client.NS, network: "tcp", to: ap(nodeIPv4, webNodePort), n: spreadProbes,
		want: replied(both(bridgeIPv4), webTarget), why: "node port on the node IP, masqueraded"})
	add(probe{from: client.Name, ns: client.NS, network: "tcp", to: ap(webIPv6, webPort), n: spreadProbes,
		want: replied(both(bridgeIPv6), webTarget), why: "IPv6 ClusterIP, " + masq})
	add(probe{from: client.Name, ns: client.NS, network: "tcp", to: ap(nodeIPv6, webNodePort), n: spreadProbes,
		want: replied(both(bridgeIPv6), webTarget), why: "IPv6 node port"})
	add(probe{from: client.Name, ns: client.NS, network: "tcp", to: ap(webIPv4, webPort+1),
		want: refused(), why: "a port the ClusterIP does not define: rejected"})
	add(probe{from: client.Name, ns: client.NS, network: "tcp", to: ap(unallocated, webPort),
		want: expect{outcome: lab.Timeout}, why: "a service-CIDR address no Service owns: dropped"})

	s = fmt.Sprintf("voip/rtp: UDP range %d-%d -> pod-2, same port", rtpFirst, rtpLast)
	rtp := []struct {
		port uint16
		why  string
	}{
		{rtpFirst - 1, "start-1: outside the range, rejected (pod-2 serves it)"},
		{rtpFirst, "range start"},
		{(rtpFirst + rtpLast) / 2, "inside the range"},
		{rtpLast, "range end"},
		{rtpLast + 1, "end+1: outside the range, rejected (pod-2 serves it)"},
	}
	for i, r := range rtp {
		want := replied(only("pod-2", bridgeIPv4), 0)
		if r.port < rtpFirst || r.port > rtpLast {
			want = refused()
		}
		p := probe{from: client.Name, ns: client.NS, network: "udp", to: ap(rtpIP, r.port), want: want, why: r.why}
		if i == 0 {
			p.section = s
		}
		add(p)
	}

	s = "default/anyport: all-ports LoadBalancer -> pod-1, same port"
	anyports := []struct {
		network string
		port    uint16
	}{{"tcp", 22}, {"tcp", 443}, {"udp", 5060}, {"tcp", 40000}, {"udp", 40000}}
	for i, a := range anyports {
		p := probe{from: client.Name, ns: client.NS, network: a.network, to: ap(anyportIP, a.port),
			want: replied(only("pod-1", bridgeIPv4), 0), why: "ClusterIP, any port"}
		if i == 0 {
			p.section = s
		}
		add(p)
	}
	for _, a := range anyports[:3] {
		add(probe{from: client.Name, ns: client.NS, network: a.network, to: ap(anyportLBIP, a.port),
			want: replied(only("pod-1", bridgeIPv4), 0), why: "LoadBalancer IP, any port"})
	}
	for _, a := range anyports[:4] {
		add(probe{from: client.Name, ns: client.NS, network: a.network, to: ap(nodeIPv4, a.port),
			want: refused(), why: "node IP: never forwarded (pod-1 serves the port)"})
	}
	return ps
}

// outcome is the result of one probe row.
type outcome struct {
	results []lab.Result
	fails   []string
}

// runProbes runs every probe row concurrently (a bounded number of connections at a time) and
// checks each against its expectation.
func runProbes(ctx context.Context, ps []probe) []outcome {
	out := make([]outcome, len(ps))
	sem := make(chan struct{}, 24)
	var wg sync.WaitGroup
	for i, p := range ps {
		if p.skip != "" {
			continue
		}
		out[i].results = make([]lab.Result, p.n)
		for j := 0; j < p.n; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				out[i].results[j] = lab.Dial(ctx, p.ns, p.network, p.to.String())
			}()
		}
	}
	wg.Wait()
	for i, p := range ps {
		if p.skip == "" {
			out[i].fails = check(p, out[i].results)
		}
	}
	return out
}

// check compares a row's results with its expectation and says what is wrong, if anything.
func check(p probe, rs []lab.Result) []string {
	var fails []string
	answered := map[string]int{}
	for _, r := range rs {
		if r.Outcome != p.want.outcome {
			fails = append(fails, fmt.Sprintf("got %v, want %v", r, p.want.outcome))
			continue
		}
		if r.Outcome != lab.Replied {
			continue
		}
		answered[r.Reply.Pod]++
		want, ok := p.want.saw[r.Reply.Pod]
		port := p.want.port
		if port == 0 {
			port = p.to.Port()
		}
		switch {
		case !ok:
			fails = append(fails, fmt.Sprintf("%s answered, want only %s", r.Reply.Pod, strings.Join(sortedKeys(p.want.saw), ", ")))
		case r.Reply.Port != port:
			fails = append(fails, fmt.Sprintf("%s got the packet on port %d, want %d", r.Reply.Pod, r.Reply.Port, port))
		case r.Reply.From.Addr() != want:
			fails = append(fails, fmt.Sprintf("%s saw source %s, want %s", r.Reply.Pod, r.Reply.From.Addr(), want))
		}
	}
	for _, pod := range p.want.pods {
		if answered[pod] == 0 {
			fails = append(fails, fmt.Sprintf("%s never answered in %d tries", pod, len(rs)))
		}
	}
	return dedupe(fails)
}

func sortedKeys(m map[string]netip.Addr) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// dedupe keeps the first of identical messages (a spread row fails the same way many times).
func dedupe(msgs []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range msgs {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}
