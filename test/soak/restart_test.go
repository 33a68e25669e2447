package soak

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// Restart-lab ports: pods serve 80 and a small range on TCP and UDP.
const (
	restartRangeFirst, restartRangeLast = 16384, 16393
	restartNodePortTCP                  = 30080
	restartNodePortUDP                  = 30081
	fillerFile                          = "fillers.yaml"
)

// restartServices are the Services the traffic goes to: a dual-stack NodePort Service and a
// TCP+UDP port-range Service, both backed by pods 1 and 2.
func restartServices() []fixture.Service {
	return []fixture.Service{
		{
			Name: "web", Type: "NodePort",
			ClusterIPs: []netip.Addr{lab.ClusterIPv4(1), lab.ClusterIPv6(1)},
			Ports: []fixture.Port{
				{Name: "http", Protocol: "TCP", Port: 80, NodePort: restartNodePortTCP},
				{Name: "dns", Protocol: "UDP", Port: 80, NodePort: restartNodePortUDP},
			},
			Endpoints: fixture.Pods(1, 2),
		},
		{
			Name: "media", ClusterIPs: []netip.Addr{lab.ClusterIPv4(2)},
			Ports: []fixture.Port{{Name: "rtp", Protocol: "UDP", Port: restartRangeFirst}, {Name: "rtpt", Protocol: "TCP", Port: restartRangeFirst}},
			Annotations: map[string]string{"nftproxy.io/port-ranges": fmt.Sprintf("rtp=%d-%d,rtpt=%d-%d",
				restartRangeFirst, restartRangeLast, restartRangeFirst, restartRangeLast)},
			Endpoints: fixture.Pods(1, 2),
		},
	}
}

// restartTargets are what the client probes: ClusterIP (both families), NodePort and range.
func restartTargets() []target {
	both := []string{"pod-1", "pod-2"}
	to80 := func(uint16) uint16 { return 80 }
	var ts []target
	for _, proto := range []string{"tcp", "udp"} {
		np := uint16(restartNodePortTCP)
		if proto == "udp" {
			np = restartNodePortUDP
		}
		ts = append(ts,
			target{name: proto + " clusterIP v4", network: proto, addr: lab.ClusterIPv4(1), first: 80, pods: both},
			target{name: proto + " clusterIP v6", network: proto, addr: lab.ClusterIPv6(1), first: 80, pods: both},
			target{name: proto + " nodePort", network: proto, addr: netip.MustParseAddr(lab.NodeIPv4), first: np, pods: both, want: to80},
			target{name: proto + " range", network: proto, addr: lab.ClusterIPv4(2), first: restartRangeFirst, last: restartRangeLast, pods: both},
		)
	}
	return ts
}

// fillersYAML is n more ClusterIP Services (one file), so a start-up sync has real work; each
// version moves every filler's endpoint to the other pod, so a daemon started after a version
// change must commit n element changes.
func fillersYAML(n, version int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		s := fixture.Service{Name: fmt.Sprintf("filler-%05d", i), Namespace: "fill",
			ClusterIPs: []netip.Addr{serviceAddr(256 + i)},
			Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 8080, Target: 80}},
			Endpoints:  fixture.Addrs(lab.PodIPv4(1 + (i+version)%2))}
		b.WriteString(s.ServiceYAML())
		b.WriteString(slicesYAML(s, version))
	}
	return b.String()
}

// startPhase says how far a daemon got before it was killed, from its -v 2 log: the manifests
// loaded (the first sync may start) and the first sync committed.
func startPhase(log string) string {
	switch {
	case strings.Contains(log, `"synced"`):
		return "after its first sync"
	case strings.Contains(log, "Loaded manifests"):
		return "during its start-up sync"
	}
	return "before loading manifests"
}

// TestRestartUnderTraffic kills, restarts and upgrades the daemon while a client keeps opening
// connections to a ClusterIP, a NodePort and a port range: the rules stay in the kernel while
// no daemon runs, and no start-up (however early it is killed) blanks them, so no probe may
// fail. Then `cleanup` removes the tables and `run` brings service back.
func TestRestartUnderTraffic(t *testing.T) {
	const scenario = "1 restart under traffic"
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(80), lab.PortRange(restartRangeFirst, restartRangeLast)}},
		run.traffic+3*time.Minute)
	e.write(restartServices()...)
	version := 0
	e.writeFile(fillerFile, fillersYAML(run.fillers, version))

	a := e.start("daemon-a", daemonBinary, metricsAddress, healthzAddress, "--min-sync-period", "50ms", "-v", "2")
	first := e.waitSynced(a, 30*time.Second)
	report.Add(t, scenario, "first start: Services programmed", "%d (+%d fillers), first sync seen %v after start",
		len(restartServices()), run.fillers, first.Round(time.Millisecond))
	if _, d := e.waitState(e.desiredState(), 15*time.Second); d != "" {
		t.Fatalf("before the traffic: kernel state differs from the rendered manifests: %s", d)
	}

	done := make(chan *tally, 1)
	go func() { done <- traffic(e.ctx, e.lab.Client(1).NS, restartTargets(), run.probeRate, run.traffic) }()
	start := time.Now()
	at := func(frac float64) { time.Sleep(time.Until(start.Add(time.Duration(frac * float64(run.traffic))))) }
	var events []string
	event := func(format string, args ...any) {
		events = append(events, fmt.Sprintf("+%v %s", time.Since(start).Round(time.Millisecond), fmt.Sprintf(format, args...)))
	}

	at(0.1)
	a.kill()
	event("SIGKILL daemon-a")
	at(0.2)
	b := e.start("daemon-b", daemonBinary, metricsAddress, healthzAddress, "--min-sync-period", "50ms", "-v", "2")
	event("started daemon-b")
	loaded := waitLog(b, "Loaded manifests", 10*time.Second)
	synced := waitLog(b, `"synced"`, 10*time.Second)
	event("daemon-b loaded its manifests %v and completed its first sync %v after start", loaded, synced)
	e.waitSynced(b, 10*time.Second)
	b.kill()
	event("SIGKILL daemon-b")

	// Kill starting daemons at fixed delays after start, and at delays after they loaded their
	// manifests (the start-up sync runs then); each start finds the fillers' endpoints changed,
	// so its first sync commits work.
	type kill struct {
		delay     time.Duration
		afterLoad bool
	}
	var kills []kill
	for _, dl := range run.startKills {
		kills = append(kills, kill{dl, false})
	}
	for _, dl := range run.loadKills {
		kills = append(kills, kill{dl, true})
	}
	phases := map[string]int{}
	for i, k := range kills {
		version++
		e.writeFile(fillerFile, fillersYAML(run.fillers, version))
		c := e.start(fmt.Sprintf("daemon-c%d", i), daemonBinary, metricsAddress, healthzAddress, "--min-sync-period", "50ms", "-v", "2")
		what := fmt.Sprintf("%v after start", k.delay)
		if k.afterLoad {
			waitLog(c, "Loaded manifests", 10*time.Second)
			what = fmt.Sprintf("%v after loading its manifests", k.delay)
		}
		time.Sleep(k.delay)
		c.kill()
		ph := startPhase(c.out.String())
		phases[ph]++
		event("SIGKILL %s %s: %s", c.name, what, ph)
		c.checkNoPanic(t)
	}
	at(0.4)
	d := e.start("daemon-d", daemonBinary, metricsAddress, healthzAddress, "--min-sync-period", "50ms", "-v", "2")
	e.waitSynced(d, 10*time.Second)
	event("daemon-d synced")

	// Upgrade, surge style: the new binary starts beside the old one against the same kernel
	// state, then the old one is stopped.
	at(0.6)
	up := e.start("daemon-next", upgradeBinary, altMetricsAddress, altHealthzAddress, "--min-sync-period", "50ms", "-v", "2")
	e.waitSynced(up, 10*time.Second)
	event("upgrade %s synced beside daemon-d", up.name)
	termAt := time.Now()
	if err := d.term(t); err != nil {
		t.Errorf("daemon-d after SIGTERM: %v; want exit 0", err)
	}
	stopTook := time.Since(termAt)
	event("daemon-d stopped (SIGTERM) in %v", stopTook.Round(time.Millisecond))

	tl := <-done
	attempted, failed := tl.total()
	t.Logf("timeline:\n  %s", strings.Join(events, "\n  "))
	t.Logf("per target: %s", tl)
	report.Add(t, scenario, "traffic", "%d targets at %d/s each for %v", len(restartTargets()), run.probeRate, run.traffic)
	report.Add(t, scenario, "connections attempted / failed", "%d / %d", attempted, failed)
	report.Add(t, scenario, "restarts", "SIGKILL a, start b (first sync %v after start), %d start-up kills, upgrade beside a running daemon", synced.Round(time.Millisecond), len(kills))
	report.Add(t, scenario, "start-up kills by phase", "%s", phasesString(phases))
	report.Add(t, scenario, "upgrade: old daemon's exit after SIGTERM", "%v", stopTook.Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%d of %d probes failed while the daemon was killed, restarted and upgraded; want 0. First failures:%s", failed, attempted, tl.failuresString())
	}
	up.checkHealthy(t)
	if _, diff := e.waitState(e.desiredState(), 15*time.Second); diff != "" {
		t.Errorf("after the restarts: kernel state differs from the rendered manifests: %s", diff)
	}

	cleanupThenRun(t, e, up, scenario)
}

// cleanupThenRun stops the daemon, runs `nftproxy cleanup` (service must stop: nothing is left),
// then `run` again and measures how long until every target answers.
func cleanupThenRun(t *testing.T, e *env, d *daemon, scenario string) {
	if err := d.term(t); err != nil {
		t.Errorf("%s after SIGTERM: %v; want exit 0", d.name, err)
	}
	if out, err := e.lab.Node.Run(daemonBinary, "cleanup"); err != nil {
		t.Fatalf("nftproxy cleanup: %v %s", err, out)
	}
	if tables, _ := e.lab.Nft("list", "tables"); strings.Contains(tables, "nftproxy") {
		t.Fatalf("after cleanup the node still has: %s", tables)
	}
	tg := restartTargets()[0]
	if r := probe(e.ctx, e.lab.Client(1).NS, tg); r == "" {
		t.Fatalf("after cleanup %s still answered; want no service", tg.name)
	}
	f := e.start("daemon-f", daemonBinary, metricsAddress, healthzAddress, "--min-sync-period", "50ms")
	start := time.Now()
	var why string
	err := e.poll(30*time.Second, func() (bool, error) {
		for _, tg := range restartTargets() {
			if why = probe(e.ctx, e.lab.Client(1).NS, tg); why != "" {
				why = tg.name + ": " + why
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("after cleanup then run: service not restored: %v (last: %s)", err, why)
	}
	restored := time.Since(start)
	tl := traffic(e.ctx, e.lab.Client(1).NS, restartTargets(), run.probeRate, time.Second)
	attempted, failed := tl.total()
	report.Add(t, scenario, "cleanup then run", "every target answers %v after run; then %d/%d probes failed",
		restored.Round(time.Millisecond), failed, attempted)
	if failed > 0 {
		t.Errorf("after cleanup then run: %d of %d probes failed:%s", failed, attempted, tl.failuresString())
	}
	f.checkHealthy(t)
}

// waitLog polls a starting daemon's log (every 200us, so a kill can follow at once) until it
// contains mark, and returns how long after the daemon's start that was seen (0 if it exited
// or limit passed first).
func waitLog(d *daemon, mark string, limit time.Duration) time.Duration {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && d.running() {
		if strings.Contains(d.out.String(), mark) {
			return time.Since(d.started)
		}
		time.Sleep(200 * time.Microsecond)
	}
	return 0
}

func phasesString(m map[string]int) string {
	var parts []string
	for _, p := range []string{"before loading manifests", "during its start-up sync", "after its first sync"} {
		parts = append(parts, fmt.Sprintf("%s: %d", p, m[p]))
	}
	return strings.Join(parts, ", ")
}
