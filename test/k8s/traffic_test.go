package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

// steadyService is a dual-stack Service that does not change during a handover: TCP and UDP
// port 80 on ClusterIPv4(ip) and ClusterIPv6(ip), endpoints pods 1 and 2.
func steadyService(ip int) fixture.Service {
	return fixture.Service{Name: "steady", Namespace: testNS, ClusterIPs: []netip.Addr{lab.ClusterIPv4(ip), lab.ClusterIPv6(ip)},
		Ports:     []fixture.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 80}},
		Endpoints: fixture.Pods(1, 2)}
}

// trafficSource is a host the traffic starts from.
type trafficSource struct {
	name string
	ns   *netns.NS
}

// trafficSources are the three paths a packet to a ClusterIP takes through the node: an
// outside client (forwarded: prerouting), a pod that is itself an endpoint (forwarded back to
// the bridge, to itself half the time: hairpin, masqueraded) and the node itself (the output
// hook, masqueraded since the node's address is outside the cluster CIDR).
func trafficSources(e *env) []trafficSource {
	return []trafficSource{{"client-1", e.lab.Client(1).NS}, {"pod-2", e.lab.Pod(2).NS}, {"node", e.lab.Node}}
}

// stream is the traffic of one source to one family of the Service.
type stream struct {
	src    trafficSource
	family string          // "IPv4" or "IPv6"
	addr   string          // ClusterIP:80 of the family
	want   map[string]bool // "pod-n to address" a reply may come from
}

func (s stream) String() string { return "from " + s.src.name + " over " + s.family }

// wrong says why a reply is not one of the stream's endpoints in its family ("" if it is).
func (s stream) wrong(r lab.Reply) string {
	if !s.want[r.Pod+" "+r.To.String()] {
		return fmt.Sprintf("%s answered at %s, want one of the Service's %s endpoints", r.Pod, r.To, s.family)
	}
	return ""
}

// streamCount is what one stream saw in one phase.
type streamCount struct {
	tcp, tcpFailed, udp, udpLost, wrong int
	// long is how many long-lived connections the stream holds, longKept how many still
	// answered from their first pod when the phase ended.
	long, longKept int
	// first is the first failed, lost or misdirected exchange, for the failure message.
	first string
}

func (c streamCount) String() string {
	return fmt.Sprintf("new TCP %d (failed %d), UDP %d (lost %d), wrong backend %d, long-lived kept %d/%d",
		c.tcp, c.tcpFailed, c.udp, c.udpLost, c.wrong, c.longKept, c.long)
}

// phaseCount is what one phase of a handover saw: per stream, and the health-check probes.
type phaseCount struct {
	streams       []streamCount // as traffic.streams
	hc, hcRefused int
	// hcReset counts health-check probes reset after connecting: a probe the answering process
	// had accepted when it exited (kube-proxy does not drain); hcFirst is the first answer
	// that was not 200.
	hcReset int
	hcFirst string
	// exit: the process holding the health-check node port exits in this phase (exitResets).
	exit bool
}

func (c phaseCount) String() string {
	return fmt.Sprintf("health-check probes %d (not 200: %d, reset by an exiting holder: %d)", c.hc, c.hcRefused, c.hcReset)
}

// longLived is a TCP connection opened before the first phase and probed at the end of each.
type longLived struct {
	stream int
	flow   *lab.Flow
	owner  string // the pod that answered first
	broken string // the phase it first failed in ("" while it answers from owner)
}

// traffic runs, for each source and each family of a steady Service, new TCP connections and UDP
// exchanges in a loop (every 20 ms) through the phases of a handover and keeps long-lived TCP
// connections open across them; and health-check probes against hcPort. An exchange counts in
// the phase it started in; a phase ends only once every stream has completed one exchange
// started in it, so no phase goes unmeasured.
type traffic struct {
	t       *testing.T
	e       *env
	hcPort  int
	streams []stream

	mu     sync.Mutex
	phase  int // index into phases
	phases []string
	counts []*phaseCount

	long []*longLived
	stop context.CancelFunc
	done sync.WaitGroup
}

// longPerStream is how many long-lived connections each stream keeps.
const longPerStream = 3

func startTraffic(t *testing.T, e *env, svc fixture.Service, hcPort int, phase string) *traffic {
	t.Helper()
	tr := &traffic{t: t, e: e, hcPort: hcPort, phase: -1}
	for _, ip := range svc.ClusterIPs {
		fam, want := "IPv4", map[string]bool{}
		if ip.Is6() {
			fam = "IPv6"
		}
		for _, ep := range svc.Endpoints {
			a := lab.PodIPv4(ep.Pod)
			if ip.Is6() {
				a = lab.PodIPv6(ep.Pod)
			}
			want[fmt.Sprintf("pod-%d %s", ep.Pod, a)] = true
		}
		for _, src := range trafficSources(e) {
			tr.streams = append(tr.streams, stream{src: src, family: fam, addr: netip.AddrPortFrom(ip, 80).String(), want: want})
		}
	}
	// Every stream is served before the first phase starts: what the handover breaks is
	// counted, not what never worked.
	for _, s := range tr.streams {
		for _, network := range []string{"tcp", "udp"} {
			tier.Until(t, e.ctx, waitBound, 100*time.Millisecond, fmt.Sprintf("%s %s %s served before the handover", network, s.addr, s), func() (bool, string) {
				r := lab.Dial(e.ctx, s.src.ns, network, s.addr)
				return r.Outcome == lab.Replied && s.wrong(r.Reply) == "", r.String()
			})
		}
	}
	for i, s := range tr.streams {
		for range longPerStream {
			f := lab.NewFlow(s.src.ns, "tcp", s.addr)
			t.Cleanup(f.Close)
			r := f.Probe(e.ctx)
			if r.Outcome != lab.Replied || s.wrong(r.Reply) != "" {
				t.Fatalf("long-lived connection to %s %s: %v", s.addr, s, r)
			}
			tr.long = append(tr.long, &longLived{stream: i, flow: f, owner: r.Reply.Pod})
		}
	}
	tr.begin(phase)
	ctx, cancel := context.WithCancel(e.ctx)
	tr.stop = cancel
	for i := range tr.streams {
		tr.done.Add(1)
		go tr.run(ctx, i)
	}
	tr.done.Add(1)
	go tr.probeHealthCheck(ctx)
	return tr
}

// setPhase ends the current phase (see end) and starts p.
func (tr *traffic) setPhase(p string) {
	tr.t.Helper()
	tr.end()
	tr.begin(p)
}

func (tr *traffic) begin(p string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.phases = append(tr.phases, p)
	tr.counts = append(tr.counts, &phaseCount{streams: make([]streamCount, len(tr.streams))})
	tr.phase = len(tr.phases) - 1
}

// end waits (bounded) until every stream has completed an exchange started in the current
// phase, then probes the long-lived connections.
func (tr *traffic) end() {
	tr.t.Helper()
	tier.Until(tr.t, tr.e.ctx, waitBound, 5*time.Millisecond, "an exchange of every stream in phase "+tr.current(), func() (bool, string) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		var missing []string
		for i, c := range tr.counts[tr.phase].streams {
			if c.tcp == 0 || c.udp == 0 {
				missing = append(missing, tr.streams[i].String())
			}
		}
		return len(missing) == 0, "none yet " + strings.Join(missing, ", ")
	})
	results := make([]lab.Result, len(tr.long))
	var wg sync.WaitGroup
	for i, l := range tr.long {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = l.flow.Probe(tr.e.ctx)
		}()
	}
	wg.Wait()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	c := tr.counts[tr.phase]
	for i, l := range tr.long {
		sc := &c.streams[l.stream]
		sc.long++
		r := results[i]
		if l.broken == "" && r.Outcome == lab.Replied && r.Reply.Pod == l.owner {
			sc.longKept++
		} else if l.broken == "" {
			l.broken = fmt.Sprintf("phase %q: got %v, want %s still answering", tr.phases[tr.phase], r, l.owner)
		}
	}
}

func (tr *traffic) current() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.phases[tr.phase]
}

// run is the loop of stream i: a new TCP connection and a new UDP exchange every 20 ms.
func (tr *traffic) run(ctx context.Context, i int) {
	defer tr.done.Done()
	s := tr.streams[i]
	for ctx.Err() == nil {
		tr.mu.Lock()
		phase := tr.phase
		tr.mu.Unlock()
		r := lab.Dial(ctx, s.src.ns, "tcp", s.addr)
		u := lab.Dial(ctx, s.src.ns, "udp", s.addr)
		if ctx.Err() != nil {
			return // a probe cut short by the end of the run counts for nothing
		}
		tr.mu.Lock()
		c := &tr.counts[phase].streams[i]
		note := func(what string, r lab.Result) {
			if c.first == "" {
				c.first = fmt.Sprintf("%s %s: %v", what, s.addr, r)
			}
		}
		c.tcp++
		if r.Outcome != lab.Replied {
			c.tcpFailed++
			note("tcp", r)
		} else if w := s.wrong(r.Reply); w != "" {
			c.wrong++
			note("tcp", r)
		}
		c.udp++
		if u.Outcome != lab.Replied {
			c.udpLost++
			note("udp", u)
		} else if w := s.wrong(u.Reply); w != "" {
			c.wrong++
			note("udp", u)
		}
		tr.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// exitResets says that in the current phase the process holding the health-check node port exits
// without draining (kube-proxy): probes it had accepted may be reset, which is no gap.
func (tr *traffic) exitResets() {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.counts[tr.phase].exit = true
}

// probeHealthCheck probes the health-check node port every 20 ms; a probe counts in the phase
// it ends in.
func (tr *traffic) probeHealthCheck(ctx context.Context) {
	defer tr.done.Done()
	for ctx.Err() == nil {
		hc := tr.e.healthCheck(tr.hcPort)
		if ctx.Err() != nil {
			return // a probe cut short by the end of the run counts for nothing
		}
		tr.mu.Lock()
		c := tr.counts[tr.phase]
		c.hc++
		switch {
		case strings.Contains(hc, " 200 "):
		case strings.Contains(hc, "connection reset by peer") || strings.HasSuffix(hc, ": EOF"):
			c.hcReset++
		default:
			c.hcRefused++
		}
		if !strings.Contains(hc, " 200 ") && c.hcFirst == "" {
			c.hcFirst = hc
		}
		tr.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// finish ends the last phase, stops the loops, logs every phase per source and family, and
// fails the test for a failed connection, a lost UDP exchange, a wrong backend, a long-lived
// connection broken or moved, naming the phase, the source and the family, or a health-check
// probe not answered 200: whichever proxy answers, the port never goes dark (only a probe the
// exiting holder had accepted may be reset, in its exitResets phase).
func (tr *traffic) finish(t *testing.T, what string) {
	t.Helper()
	tr.halt()
	for _, msg := range tr.report(what, t.Logf) {
		t.Error(msg)
	}
}

// halt ends the last phase and stops the loops.
func (tr *traffic) halt() {
	tr.t.Helper()
	tr.end()
	tr.stop()
	tr.done.Wait()
}

// report logs the counts of every phase and returns a failure message per phase and stream
// that failed, lost or misdirected an exchange, and per long-lived connection broken or moved.
func (tr *traffic) report(what string, logf func(string, ...any)) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var fails []string
	for p, name := range tr.phases {
		c := tr.counts[p]
		logf("%s, %s: %v", what, name, c)
		if c.hcRefused > 0 || c.hcReset > 0 && !c.exit {
			fails = append(fails, fmt.Sprintf("%s, phase %q: %v, want every health-check probe answered 200; first: %s", what, name, c, c.hcFirst))
		}
		for i, sc := range c.streams {
			logf("%s, %s, %s: %v", what, name, tr.streams[i], sc)
			if sc.tcpFailed > 0 || sc.udpLost > 0 || sc.wrong > 0 {
				fails = append(fails, fmt.Sprintf("%s, phase %q, %s: %v, want no failed, lost or misdirected exchange; first: %s",
					what, name, tr.streams[i], sc, sc.first))
			}
		}
	}
	for _, l := range tr.long {
		if l.broken != "" {
			fails = append(fails, fmt.Sprintf("%s, long-lived connection %s (to %s) broken in %s", what, tr.streams[l.stream], l.owner, l.broken))
		}
	}
	return fails
}

// The traffic generator finds a fault that hits one source and family only, and names it: with
// nftproxy serving, faults drop every packet from pod-2 to the Service's IPv6 address, drop the
// node's UDP datagrams to its IPv4 address, and send client-1's new IPv4 TCP connections to
// pod-3, which is not an endpoint. The phase with the faults in place counts failed
// connections, lost exchanges and broken long-lived connections for pod-2 over IPv6, lost
// exchanges for the node over IPv4 and wrong backends for client-1 over IPv4, and nothing else;
// the phases before and after count no fault, and every failure names its phase, source and
// family.
func TestTrafficCountsPerSourceAndFamily(t *testing.T) {
	e := newLabEnv(t, nil, lab.Options{Pods: 3})
	steady := steadyService(55)
	e.createService(steady)
	lb := httpService("lb-local", 52, 1)
	lb.LoadBalancerIPs = []netip.Addr{lab.LoadBalancerIPv4(52)}
	hcPort := e.createLocalLB(lb)
	e.waitProgrammed(steady)

	// The filter chains run before conntrack (-200); the NAT chain before nftproxy's (-101), so
	// its DNAT binds first.
	faults := fmt.Sprintf(`table inet traffic-faults {
	chain pre { type filter hook prerouting priority -300; policy accept; ip6 saddr %s ip6 daddr %s drop; }
	chain out { type filter hook output priority -300; policy accept; ip daddr %s udp dport 80 drop; }
	chain nat { type nat hook prerouting priority -150; policy accept; ip saddr %s ip daddr %s tcp dport 80 dnat ip to %s; }
}
`, lab.PodIPv6(2), lab.ClusterIPv6(55), lab.ClusterIPv4(55), lab.ClientIPv4(1), lab.ClusterIPv4(55), lab.PodIPv4(3))

	// An exchange counts in the phase it started in: the ones started while the faults are
	// written or removed may see them or not, so they get phases of their own.
	const applying, faulty, removing = "1. faults being written", "2. faults in place", "3. faults being removed"
	tr := startTraffic(t, e, steady, hcPort, "0. served")
	tr.setPhase(applying)
	if err := e.lab.NftApply(faults); err != nil {
		t.Fatalf("fault table: %v", err)
	}
	tr.setPhase(faulty)
	tr.setPhase(removing)
	if _, err := e.lab.Nft("delete", "table", "inet", "traffic-faults"); err != nil {
		t.Fatal(err)
	}
	tr.setPhase("4. served again")
	tr.halt()
	fails := tr.report("self-test", t.Logf)

	index := func(src, fam string) int {
		for i, s := range tr.streams {
			if s.src.name == src && s.family == fam {
				return i
			}
		}
		t.Fatalf("no stream from %s over %s", src, fam)
		return -1
	}
	podV6, nodeV4, clientV4 := index("pod-2", "IPv6"), index("node", "IPv4"), index("client-1", "IPv4")
	for p, name := range tr.phases {
		for i, c := range tr.counts[p].streams {
			got := c
			got.first = ""
			want := streamCount{tcp: c.tcp, udp: c.udp, long: longPerStream, longKept: longPerStream}
			if i == podV6 && p >= 1 {
				want.longKept = 0 // broken by the first probe after the faults, broken for good
			}
			switch {
			case name == faulty && i == podV6:
				want.tcpFailed, want.udpLost = c.tcp, c.udp
			case name == faulty && i == nodeV4:
				want.udpLost = c.udp
			case name == faulty && i == clientV4:
				want.wrong = c.tcp
			case name == applying || name == removing:
				if i == podV6 || i == nodeV4 || i == clientV4 {
					continue // may or may not see the faults
				}
			}
			if got != want || c.tcp == 0 {
				t.Errorf("phase %q, %s: got %v, want %v", name, tr.streams[i], got, want)
			}
		}
	}
	named := map[string]int{}
	for _, f := range fails {
		for _, i := range []int{podV6, nodeV4, clientV4} {
			for _, p := range []string{applying, faulty, removing} {
				if strings.Contains(f, fmt.Sprintf("%q", p)) && strings.Contains(f, tr.streams[i].String()) {
					named[tr.streams[i].String()]++
				}
			}
		}
	}
	if sum := named[tr.streams[podV6].String()] + named[tr.streams[nodeV4].String()] + named[tr.streams[clientV4].String()]; sum != len(fails) {
		t.Errorf("failures that do not name a phase with the faults and a faulty source and family:\n%s", strings.Join(fails, "\n"))
	}
	// At least one failure per faulty stream, and one more per long-lived connection of pod-2
	// over IPv6.
	if named[tr.streams[podV6].String()] < 1+longPerStream || named[tr.streams[nodeV4].String()] < 1 || named[tr.streams[clientV4].String()] < 1 {
		t.Errorf("failures per faulty stream %v, want pod-2 over IPv6 at least %d, the others at least 1:\n%s",
			named, 1+longPerStream, strings.Join(fails, "\n"))
	}
}
