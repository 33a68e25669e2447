package soak

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// kernelServices: web serves IPv4 and IPv6 throughout.
func kernelServices() []fixture.Service {
	return []fixture.Service{{Name: "web", ClusterIPs: []netip.Addr{lab.ClusterIPv4(1), lab.ClusterIPv6(1)},
		Ports:     []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "dns", Protocol: "UDP", Port: 80}},
		Endpoints: fixture.Pods(1, 2)}}
}

// lateService is written while the kernel refuses the daemon's transactions.
func lateService(name string, n int) fixture.Service {
	return fixture.Service{Name: name, ClusterIPs: []netip.Addr{lab.ClusterIPv4(n), lab.ClusterIPv6(n)},
		Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80}}, Endpoints: fixture.Pods(1, 2)}
}

// expectedFailureLogs is how many "sync failed" lines the runner writes for n failures in a
// row: the first, then every tenth (proxy/proxier.Runner).
func expectedFailureLogs(n int) int {
	if n <= 0 {
		return 0
	}
	return 1 + n/10
}

// TestKernelRefusesTransaction makes the kernel refuse every transaction of the daemon: another
// process deletes table ip6 nftproxy and holds a table of that name with the owner flag (only
// its netlink socket may change it). A sync writes both families in one transaction, so each
// fails with EPERM. The IPv4 rules must stay and keep serving, the failures be counted and
// logged once (not per retry), and the retry succeed once the other process exits (the kernel
// then removes its table).
func TestKernelRefusesTransaction(t *testing.T) {
	const scenario = "6 kernel errors"
	e := newEnv(t, lab.Options{Pods: 2}, 3*time.Minute)
	e.write(kernelServices()...)
	// Without drift events: the scenarios are the kernel refusing our commits and the retries.
	// With them, the foreign set of conflictingSet would be removed as drift before the partial
	// sync that collides with it (TestDriftFoundByEvents covers that path).
	d := e.start("daemon", daemonBinary, metricsAddress, healthzAddress, "--min-sync-period", "50ms", "--drift-events=false")
	e.waitSynced(d, 30*time.Second)
	if _, diff := e.waitState(e.desiredState(), 15*time.Second); diff != "" {
		t.Fatalf("before the failure: %s", diff)
	}
	ipBefore, err := dumpState(e.lab.Node, ourTables[:1])
	if err != nil {
		t.Fatal(err)
	}
	m0, err := e.scrape(d)
	if err != nil {
		t.Fatal(err)
	}

	// The other writer: `nft -i` keeps one netlink socket for its session.
	holder := e.lab.Node.Command("nft", "-i")
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var hout tier.Buffer
	holder.Stdout, holder.Stderr = &hout, &hout
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	held := true
	release := func() {
		if held {
			held = false
			stdin.Close()
			_ = holder.Wait()
		}
	}
	t.Cleanup(release)
	if _, err := io.WriteString(stdin, "delete table ip6 nftproxy\nadd table ip6 nftproxy { flags owner; }\n"); err != nil {
		t.Fatal(err)
	}
	if err := e.poll(5*time.Second, func() (bool, error) {
		out, _ := e.lab.Nft("list", "table", "ip6", "nftproxy")
		return strings.Contains(out, "flags owner"), nil
	}); err != nil {
		t.Fatalf("the other writer did not get its owned table: %v; its output: %s", err, hout.String())
	}

	targets := []target{
		{name: "tcp web v4", network: "tcp", addr: lab.ClusterIPv4(1), first: 80, pods: []string{"pod-1", "pod-2"}},
		{name: "udp web v4", network: "udp", addr: lab.ClusterIPv4(1), first: 80, pods: []string{"pod-1", "pod-2"}},
	}
	hold := 4 * time.Second
	done := make(chan *tally, 1)
	go func() { done <- traffic(e.ctx, e.lab.Client(1).NS, targets, run.probeRate, hold) }()
	late := lateService("late", 5)
	e.write(late)
	if err := e.poll(10*time.Second, func() (bool, error) {
		m, err := e.scrape(d)
		return err == nil && tier.Delta(m0, m, "nftproxy_sync_failures_total") > 0, err
	}); err != nil {
		t.Fatalf("no failed sync counted while the kernel refuses: %v", err)
	}
	tl := <-done
	mHeld, err := e.scrape(d)
	if err != nil {
		t.Fatal(err)
	}
	failures := int(tier.Delta(m0, mHeld, "nftproxy_sync_failures_total"))
	ipHeld, err := dumpState(e.lab.Node, ourTables[:1])
	if err != nil {
		t.Fatal(err)
	}
	if diff := ipHeld.diff(ipBefore, 5); diff != "" {
		t.Errorf("table ip nftproxy changed while the transactions failed (they must be atomic): %s", diff)
	}
	logged := countLines(d.out.String(), "sync failed")
	for _, l := range strings.Split(d.out.String(), "\n") {
		if strings.Contains(l, "sync failed") {
			t.Logf("the failure as logged: %s", l)
		}
	}
	if logged != expectedFailureLogs(failures) {
		t.Errorf("%d failed syncs logged %d times; want %d (the first, then every tenth)", failures, logged, expectedFailureLogs(failures))
	}
	attempted, failed := tl.total()
	report.Add(t, scenario, "cause", "another process deletes table ip6 nftproxy and holds an owned one (EPERM for us) for %v", hold)
	report.Add(t, scenario, "failed syncs counted / logged", "%d / %d (nftproxy_sync_failures_total; log lines)", failures, logged)
	report.Add(t, scenario, "IPv4 probes during the failures attempted / failed", "%d / %d (previous ruleset kept)", attempted, failed)
	if failed > 0 {
		t.Errorf("%d of %d IPv4 probes failed while the transactions failed; want 0:%s", failed, attempted, tl.failuresString())
	}

	released := time.Now()
	release()
	if _, diff := e.waitState(e.desiredState(), 60*time.Second); diff != "" {
		t.Fatalf("after the cause was removed: not recovered: %s", diff)
	}
	report.Add(t, scenario, "recovery after the cause is removed", "exact desired state within %v of the other process exiting (retry backoff included)",
		time.Since(released).Round(time.Millisecond))
	if countLines(d.out.String(), "sync recovered") == 0 {
		t.Errorf("no \"sync recovered\" log line after the retry succeeded")
	}
	for _, a := range late.ClusterIPs {
		if why := probe(e.ctx, e.lab.Client(1).NS, target{name: "late", network: "tcp", addr: a, first: 80}); why != "" {
			t.Errorf("late Service %s after recovery: %s", a, why)
		}
	}
	d.checkHealthy(t)

	conflictingSet(t, e, d, scenario)
}

var affSet = regexp.MustCompile(`map (affmap-[A-Z0-9]+-default/late2/tcp/http) \{`)

// conflictingSet has another writer create, inside table ip6 nftproxy, a set with the name of a
// set the next Service needs (an ip6 table's affinity map of a sticky port: per-Service sets
// remain only for those and for source ranges), of another type. The daemon's partial sync adding that set
// fails; its retry (a full sync) reads the table and replaces the foreign set.
func conflictingSet(t *testing.T, e *env, d *daemon, scenario string) {
	late := lateService("late2", 6)
	late.Edit = func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }
	// The map's name comes from render on a copy of the manifests with late2 added.
	tmp := t.TempDir()
	entries, err := os.ReadDir(e.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if err := copyFile(filepath.Join(e.dir, en.Name()), filepath.Join(tmp, en.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := fixture.WriteFile(tmp, serviceFile(late), late.ServiceYAML()); err != nil {
		t.Fatal(err)
	}
	if err := fixture.WriteFile(tmp, sliceFile(late), slicesYAML(late, 0)); err != nil {
		t.Fatal(err)
	}
	flags := e.flags()
	flags[1] = tmp
	rendered, err := e.lab.Node.Run(append([]string{daemonBinary, "render"}, flags...)...)
	if err != nil {
		t.Fatal(err)
	}
	mm := affSet.FindStringSubmatch(rendered)
	if mm == nil {
		t.Fatalf("no affinity set for default/late2 in the render:\n%s", tail(rendered, 40))
	}
	if err := e.lab.NftApply(fmt.Sprintf("add set ip6 nftproxy %s { type inet_service; elements = { 1 } }\n", mm[1])); err != nil {
		t.Fatal(err)
	}
	m0, err := e.scrape(d)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.write(late)
	if _, diff := e.waitState(e.desiredState(), 60*time.Second); diff != "" {
		t.Fatalf("with a foreign set named like our map: never reached the desired state: %s", diff)
	}
	m1, err := e.scrape(d)
	if err != nil {
		t.Fatal(err)
	}
	report.Add(t, scenario, "foreign set with our set's name, other type", "%.0f failed syncs, exact desired state within %v of the change (the full retry replaces the set)",
		tier.Delta(m0, m1, "nftproxy_sync_failures_total"), time.Since(start).Round(time.Millisecond))
	for _, a := range late.ClusterIPs {
		if why := probe(e.ctx, e.lab.Client(1).NS, target{name: "late2", network: "tcp", addr: a, first: 80}); why != "" {
			t.Errorf("late2 Service %s: %s", a, why)
		}
	}
	d.checkHealthy(t)
}
