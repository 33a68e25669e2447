package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// A manifest source that fails keeps the last good state.

// TestOnceMissingDirectoryKeepsRules: `run --once` on a missing directory exits non-zero and
// leaves the kernel as it was (it used to apply "no Services": every rule deleted, exit 0).
func TestOnceMissingDirectoryKeepsRules(t *testing.T) {
	t.Parallel()
	svc := fixture.Service{
		Name:       "web",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(50), lab.ClusterIPv6(50)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1),
	}
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{lab.Port(8080)}}, svc)
	once := func(dir string) (string, error) {
		return e.lab.Node.Run(append([]string{daemonBinary, "run", "--once"}, tier.ManifestFlags(dir)...)...)
	}
	if out, err := once(e.dir); err != nil {
		t.Fatalf("run --once: %v\n%s", err, out)
	}
	before := e.ruleset()
	if !strings.Contains(before, `"`+svc.Key()) {
		t.Fatalf("run --once did not program %s:\n%s", svc.Key(), before)
	}
	addr := hostPort(lab.ClusterIPv4(50), 80)
	want := replied(podNames(1), 8080, netip.MustParseAddr(lab.PodGatewayV4))
	want.check(t, "tcp "+addr+" after run --once", e.lab.Client(1).Dial(e.ctx, "tcp", addr))

	out, err := once(filepath.Join(t.TempDir(), "nonexistent"))
	if out += fmt.Sprint(err); err == nil || !strings.Contains(out, "read manifest directory") || !strings.Contains(out, "the kernel is unchanged") {
		t.Errorf("run --once on a missing directory: err %v, output:\n%s\nwant a failure naming the directory", err, out)
	}
	if after := e.ruleset(); after != before {
		t.Errorf("run --once on a missing directory changed the ruleset:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	want.check(t, "tcp "+addr+" after run --once on a missing directory", e.lab.Client(1).Dial(e.ctx, "tcp", addr))
}

// TestDaemonManifestDirectoryMovedAwayAndBack: the daemon keeps its rules while its directory is
// gone (it used to delete every Service), says so in its log and metrics, and when a directory
// is back at the path it programs what that holds and every later edit (it used to watch the
// moved-away directory forever).
func TestDaemonManifestDirectoryMovedAwayAndBack(t *testing.T) {
	t.Parallel()
	web := fixture.Service{
		Name:       "web",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(51)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1),
	}
	api := fixture.Service{
		Name:       "api",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(52)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1),
	}
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{lab.Port(8080)}}, web)
	parent := t.TempDir()
	dir := filepath.Join(parent, "manifests")
	if err := os.Rename(e.dir, dir); err != nil {
		t.Fatal(err)
	}
	e.dir = dir
	const metricsAddr = "127.0.0.1:10249"
	e.flags = []string{"--metrics-bind-address", metricsAddr}
	e.start(web)
	webAddr := hostPort(lab.ClusterIPv4(51), 80)
	want := replied(podNames(1), 8080, netip.MustParseAddr(lab.PodGatewayV4))

	moved := filepath.Join(parent, "moved")
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	// Give a wrong daemon time to act on the missing directory (it reloads within 100 ms and
	// syncs within 50 ms).
	time.Sleep(time.Second)
	if rs := e.ruleset(); !strings.Contains(rs, `"`+web.Key()) {
		t.Fatalf("the directory went away and %s was deleted; ruleset:\n%s", web.Key(), rs)
	}
	e.waitLog("Manifest directory cannot be read")
	e.waitMetric(metricsAddr, `nftproxy_source_up{source="manifests"} 0`)
	want.check(t, "tcp "+webAddr+" while the directory is gone", e.lab.Client(1).Dial(e.ctx, "tcp", webAddr))
	if n := strings.Count(e.daemon.Output(), "Manifest directory cannot be read"); n != 1 {
		t.Errorf("the failure is logged %d times; want once per streak", n)
	}

	if err := os.Rename(moved, dir); err != nil {
		t.Fatal(err)
	}
	e.waitLog("Manifest directory is back")
	e.write(api)
	e.waitProgrammed(api)
	want.check(t, "tcp "+hostPort(lab.ClusterIPv4(52), 80)+" added after the directory returned", e.lab.Client(1).Dial(e.ctx, "tcp", hostPort(lab.ClusterIPv4(52), 80)))
	e.waitMetric(metricsAddr, `nftproxy_source_up{source="manifests"} 1`)
	if err := os.Remove(filepath.Join(dir, web.File())); err != nil {
		t.Fatal(err)
	}
	e.waitFor("web deleted with its file", func(rs string) bool { return !strings.Contains(rs, `"`+web.Key()) })
}

// waitLog waits (bounded) until the daemon's output contains s.
func (e *env) waitLog(s string) {
	e.t.Helper()
	tier.Until(e.t, e.ctx, programTimeout, pollInterval, fmt.Sprintf("the daemon logging %q", s), func() (bool, string) {
		out := e.daemon.Output()
		return strings.Contains(out, s), "output:\n" + out
	})
}

// waitMetric waits (bounded) until the daemon's /metrics, scraped in the node, has the line.
func (e *env) waitMetric(addr, line string) {
	e.t.Helper()
	tier.Until(e.t, e.ctx, programTimeout, pollInterval, fmt.Sprintf("/metrics with %q", line), func() (bool, string) {
		r, err := tier.Get(e.ctx, e.lab.Node, "http://"+addr+"/metrics")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(r.Body, line+"\n"), r.Body
	})
}
