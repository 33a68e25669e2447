package e2e

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// statsPort is the UDP port of the streaming scenarios (statsd's), on the Service and the pods;
// statsNodePort a node port of it.
const statsPort, statsNodePort = 8125, 30125

// statsService is a dual-stack UDP Service on statsPort at ClusterIPv4(n) and ClusterIPv6(n).
func statsService(name string, n int, eps []fixture.Endpoint) fixture.Service {
	return fixture.Service{Name: name, ClusterIPs: []netip.Addr{lab.ClusterIPv4(n), lab.ClusterIPv6(n)},
		Ports: []fixture.Port{{Name: "stats", Protocol: "UDP", Port: statsPort, Target: statsPort}}, Endpoints: eps}
}

// statsDsts are a stats Service's two frontends, IPv4 then IPv6.
func statsDsts(n int) []netip.AddrPort {
	return []netip.AddrPort{netip.AddrPortFrom(lab.ClusterIPv4(n), statsPort), netip.AddrPortFrom(lab.ClusterIPv6(n), statsPort)}
}

// TestUDPStreamSurvivesScaleToZero: a client keeps sending to a UDP Service from one socket
// while the Service scales from pod-1 to no endpoints and back to pod-2, IPv4 and IPv6. With no
// endpoints the datagrams are refused (none is carried to pod-1, which still answers here, so a
// conntrack entry left from before would show); once pod-2 is the endpoint the same 5-tuple
// reaches it. Upstream kube-proxy (1.32 until its 2026 fix) black-holed such a stream for as long
// as it kept sending: its cleanup skipped Services without endpoints, so the entries DNAT'ed to
// the old endpoint stayed.
//
// Streams to the Service's node port on the node's IPv4 and IPv6 addresses do the same: kube-proxy
// v1.37 still leaves those entries (it matches node ports on the port alone, so it skips them
// while a Service has no endpoints); nftproxy matches them on the node's addresses.
func TestUDPStreamSurvivesScaleToZero(t *testing.T) {
	t.Parallel()
	svc := statsService("stats", 60, fixture.Pods(1))
	svc.Type, svc.Ports[0].NodePort = "NodePort", statsNodePort
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(statsPort)}}, svc)
	e.start(svc)

	dsts := append(statsDsts(60), netip.AddrPortFrom(netip.MustParseAddr(lab.NodeIPv4), statsNodePort),
		netip.AddrPortFrom(netip.MustParseAddr(lab.NodeIPv6), statsNodePort))
	var streams []*udpStream
	for _, dst := range dsts {
		s := startStream(t, e.lab.Client(1).NS, dst)
		awaitReplies(t, e, s, "before: "+dst.String()+" answered by pod-1", "pod-1", nil, 20)
		streams = append(streams, s)
	}

	svc.Endpoints = []fixture.Endpoint{}
	e.write(svc)
	for _, s := range streams {
		_, refused := s.counts()
		awaitRefusals(t, e, s, "no endpoints: "+s.dst.String()+" refused", refused, 20)
	}

	svc.Endpoints = fixture.Pods(2)
	e.write(svc)
	for _, s := range streams {
		before, _ := s.counts()
		awaitReplies(t, e, s, "scaled back: the same 5-tuple to "+s.dst.String()+" answered by pod-2", "pod-2", before, 20)
		want := "src=" + lab.PodIPv4(2).String() + " "
		if s.dst.Addr().Is6() {
			want = "src=" + lab.PodIPv6(2).String() + " "
		}
		if ct := conntrackEntries(t, e, s.local(), s.dst); len(ct) != 1 || !strings.Contains(ct[0], want) {
			t.Errorf("%s: conntrack entries %q, want exactly one, answered from pod-2", s, ct)
		}
	}
}

// TestUDPStreamsSurviveRestart: the daemon is restarted while clients keep sending to two UDP
// Services, IPv4 and IPv6. One Service keeps its endpoint (pod-1): its streams keep their
// conntrack entries (marked before, still marked after) and their endpoint: restarting the proxy
// must not move live flows, as kube-proxy's first sync once did by cleaning every UDP Service's
// entries. The other's endpoint moves from pod-1 to pod-2 while the daemon is
// down: the restarted daemon deletes its entries, and the same 5-tuples reach pod-2.
func TestUDPStreamsSurviveRestart(t *testing.T) {
	t.Parallel()
	steady, moved := statsService("steady", 61, fixture.Pods(1)), statsService("moved", 62, fixture.Pods(1))
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(statsPort)}}, steady, moved)
	e.flags = []string{"--metrics-bind-address", "127.0.0.1:10249"}
	e.start(steady, moved)

	// Each stream's entry is marked before the restart: the mark tells the entry from before
	// from a new one of the same 5-tuple.
	const mark = 0x5eed
	marked := "mark=" + fmt.Sprint(mark) + " "
	start := func(n int) []*udpStream {
		var out []*udpStream
		for _, dst := range statsDsts(n) {
			s := startStream(t, e.lab.Client(1).NS, dst)
			awaitReplies(t, e, s, "before the restart: "+dst.String()+" answered by pod-1", "pod-1", nil, 20)
			markEntry(t, e, s.local(), dst, mark)
			if ct := conntrackEntries(t, e, s.local(), dst); len(ct) != 1 || !strings.Contains(ct[0], marked) {
				t.Fatalf("%s: conntrack entries %q, want exactly one, marked", s, ct)
			}
			out = append(out, s)
		}
		return out
	}
	steadyStreams, movedStreams := start(61), start(62)

	e.stop()
	moved.Endpoints = fixture.Pods(2)
	e.write(moved)
	e.start()
	// The restarted daemon's conntrack cleanup has run once it reports a cleanup of each family.
	for _, fam := range []string{"IPv4", "IPv6"} {
		series := `kubeproxy_conntrack_reconciler_sync_duration_seconds_count{ip_family="` + fam + `"}`
		tier.Until(t, e.ctx, streamWait, pollInterval, "the restarted daemon's first "+fam+" conntrack cleanup", func() (bool, string) {
			m, err := scrapeNode(e)
			if err != nil {
				return false, err.Error()
			}
			return m[series] >= 1, series
		})
	}

	for _, s := range movedStreams {
		before, _ := s.counts()
		awaitReplies(t, e, s, "after the restart: "+s.dst.String()+" (endpoint moved) answered by pod-2", "pod-2", before, 20)
		if ct := conntrackEntries(t, e, s.local(), s.dst); len(ct) != 1 || strings.Contains(ct[0], marked) {
			t.Errorf("%s: conntrack entries %q after the restart, want one new (unmarked) entry", s, ct)
		}
	}
	for _, s := range steadyStreams {
		before, _ := s.counts()
		awaitReplies(t, e, s, "after the restart: "+s.dst.String()+" still answered by pod-1", "pod-1", before, 20)
		if ct := conntrackEntries(t, e, s.local(), s.dst); len(ct) != 1 || !strings.Contains(ct[0], marked) {
			t.Errorf("%s: conntrack entries %q after the restart, want the marked entry from before", s, ct)
		}
	}
}

// TestUDPStreamStartedBeforeTheDaemon: clients already send to a UDP Service when the daemon
// starts (a node booting, a daemon replaced), IPv4 and IPv6, through a node whose firewall
// tracks connections. With no Service rules yet their datagrams
// leave untranslated towards the gateway, which drops them, and each stream's conntrack entry
// records no translation; once the daemon has programmed the Service, its first cleanup deletes
// those entries and the same 5-tuples reach pod-1.
func TestUDPStreamStartedBeforeTheDaemon(t *testing.T) {
	t.Parallel()
	svc := statsService("early", 63, fixture.Pods(1))
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(statsPort)}}, svc)
	// A node's own firewall (or its CNI) uses conntrack before any service proxy runs; a fresh
	// namespace tracks nothing until some rule needs it.
	if err := e.lab.NftApply("table inet host-firewall {\n\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n\t\tct state invalid drop\n\t}\n}\n"); err != nil {
		t.Fatal(err)
	}
	var streams []*udpStream
	for _, dst := range statsDsts(63) {
		s := startStream(t, e.lab.Client(1).NS, dst)
		untranslated := "src=" + dst.Addr().String() + " "
		tier.Until(t, e.ctx, streamWait, pollInterval, "an untranslated conntrack entry of "+dst.String(), func() (bool, string) {
			ct := conntrackEntries(t, e, s.local(), dst)
			return len(ct) == 1 && strings.Contains(ct[0], untranslated), strings.Join(ct, "; ") + " / " + s.String()
		})
		streams = append(streams, s)
	}
	e.start(svc)
	for _, s := range streams {
		awaitReplies(t, e, s, "once programmed: the same 5-tuple to "+s.dst.String()+" answered by pod-1", "pod-1", nil, 20)
	}
}

// scrapeNode reads the daemon's /metrics on the node's loopback.
func scrapeNode(e *env) (tier.Sample, error) {
	resp, err := e.lab.Node.HTTPClient(5 * time.Second).Get("http://127.0.0.1:10249/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return tier.ParseMetrics(string(body))
}
