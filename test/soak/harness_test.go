package soak

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

const (
	// metricsAddress and healthzAddress are on the node's loopback; the upgrade runs a second
	// daemon beside the first on the alt addresses.
	metricsAddress    = "127.0.0.1:10249"
	healthzAddress    = "127.0.0.1:10256"
	altMetricsAddress = "127.0.0.1:10259"
	altHealthzAddress = "127.0.0.1:10266"
	pollInterval      = 25 * time.Millisecond
)

// env is one scenario: a lab, its manifest directory, and the daemons started in its node.
type env struct {
	t   *testing.T
	lab *lab.Lab
	dir string
	ctx context.Context
}

// newEnv builds a lab (removed when t ends) with the Node manifest written, bounded by limit.
func newEnv(t *testing.T, opts lab.Options, limit time.Duration) *env {
	t.Helper()
	netns.Skip(t)
	if daemonBinary == "" {
		t.Fatal("the daemon binary was not built")
	}
	e := &env{t: t, lab: lab.New(t, opts), dir: t.TempDir()}
	// Probes that must be refused come fast; the kernel would rate-limit the ICMP errors.
	if _, err := e.lab.Node.Run("sysctl", "-q", "-w", "net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	e.ctx = ctx
	e.writeFile("node.yaml", fixture.LabNode().YAML())
	return e
}

// flags are the daemon's lab flags (pod and service CIDRs, the node name, the manifests).
func (e *env) flags() []string { return tier.ManifestFlags(e.dir) }

// writeFile (re)writes a manifest atomically: the daemon never reads half a file.
func (e *env) writeFile(name, content string) {
	e.t.Helper()
	if err := fixture.WriteFile(e.dir, name, content); err != nil {
		e.t.Fatal(err)
	}
}

// write writes each Service's file and, unless it has no endpoints, its EndpointSlices' file.
func (e *env) write(ss ...fixture.Service) {
	e.t.Helper()
	for _, s := range ss {
		e.writeFile(serviceFile(s), s.ServiceYAML())
		if s.Endpoints != nil {
			e.writeFile(sliceFile(s), slicesYAML(s, 0))
		}
	}
}

// daemon is one nftproxy process in the node. Unlike lab.Process it can be SIGKILLed and
// exposes its pid (for /proc figures); its log is kept, not streamed (churn logs a lot).
type daemon struct {
	name    string
	cmd     *exec.Cmd
	out     *tier.Buffer
	done    chan struct{}
	err     error
	metrics string // address of its /metrics in the node
	started time.Time
}

// start runs `bin run` with the lab flags plus extra, metrics on metricsAddr. The daemon is
// killed when the test ends if it is still running; its log goes to the test log on failure.
func (e *env) start(name, bin, metricsAddr, healthzAddr string, extra ...string) *daemon {
	e.t.Helper()
	argv := append([]string{bin, "run"}, e.flags()...)
	argv = append(argv, "--metrics-bind-address", metricsAddr, "--healthz-bind-address", healthzAddr)
	argv = append(argv, extra...)
	d := &daemon{name: name, out: &tier.Buffer{}, done: make(chan struct{}), metrics: metricsAddr}
	d.cmd = e.lab.Node.Command(argv...)
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.out
	d.started = time.Now()
	if err := d.cmd.Start(); err != nil {
		e.t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.done)
	}()
	e.t.Cleanup(func() {
		d.kill()
		if e.t.Failed() {
			e.t.Logf("%s log (tail):\n%s", d.name, tail(d.out.String(), 60))
		}
	})
	return d
}

// running reports whether the process has not exited.
func (d *daemon) running() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// kill sends SIGKILL and waits for the exit.
func (d *daemon) kill() {
	if d.running() {
		_ = d.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-d.done
}

// term sends SIGTERM and waits for the exit; it returns the exit error. A daemon slow to exit
// (a busy machine) is logged, not killed; one still running tier.StopHang later is killed and
// that is the error.
func (d *daemon) term(t testing.TB) error {
	if !d.running() {
		return fmt.Errorf("%s had already exited: %v", d.name, d.err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	const slow = 10 * time.Second
	select {
	case <-d.done:
		return d.err
	case <-time.After(slow):
	}
	t.Logf("%s still running %s after SIGTERM (a busy machine?); waiting up to %s more", d.name, slow, tier.StopHang)
	select {
	case <-d.done:
		return d.err
	case <-time.After(tier.StopHang):
		d.kill()
		return fmt.Errorf("%s did not exit within %s of SIGTERM: killed", d.name, slow+tier.StopHang)
	}
}

// pid is the daemon's process id (`ip netns exec` execs it, so it is the command's pid).
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// peakRSS is the daemon's VmHWM from /proc, e.g. "61234 kB"; read it while it runs.
func (d *daemon) peakRSS() string { return tier.PeakRSS(d.pid()) }

// checkHealthy fails t if the daemon exited or ever logged a panic or a Go runtime fatal error.
func (d *daemon) checkHealthy(t *testing.T) {
	t.Helper()
	if !d.running() {
		t.Errorf("%s exited: %v", d.name, d.err)
	}
	d.checkNoPanic(t)
}

func (d *daemon) checkNoPanic(t *testing.T) {
	t.Helper()
	out := d.out.String()
	for _, m := range []string{"panic:", "fatal error:", "goroutine 1 ["} {
		if strings.Contains(out, m) {
			t.Errorf("%s log contains %q; want no panic:\n%s", d.name, m, tail(out, 40))
			return
		}
	}
}

// waitSynced waits until the daemon has completed a sync (its last-sync gauge is set) and
// returns how long after start that was seen.
func (e *env) waitSynced(d *daemon, limit time.Duration) time.Duration {
	e.t.Helper()
	var last error
	err := e.poll(limit, func() (bool, error) {
		if !d.running() {
			return false, fmt.Errorf("%s exited: %v\n%s", d.name, d.err, tail(d.out.String(), 30))
		}
		m, err := e.scrape(d)
		if err != nil {
			last = err
			return false, nil
		}
		return m["nftproxy_last_sync_timestamp_seconds"] > 0, nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %s's first sync: %v (last scrape error: %v)", d.name, err, last)
	}
	return time.Since(d.started)
}

// poll is tier.Poll bounded by the scenario's context, every pollInterval.
func (e *env) poll(limit time.Duration, cond func() (bool, error)) error {
	return tier.Poll(e.ctx, limit, pollInterval, cond)
}

// waitRuleset waits until the node's `nft list ruleset` contains every mark.
func (e *env) waitRuleset(limit time.Duration, marks ...string) {
	e.t.Helper()
	var rs string
	err := e.poll(limit, func() (bool, error) {
		var err error
		rs, err = e.lab.Ruleset()
		if err != nil {
			return false, err
		}
		for _, m := range marks {
			if !strings.Contains(rs, m) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %q in the ruleset: %v; ruleset:\n%s", marks, err, tail(rs, 80))
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// countLines counts the lines of s containing every one of subs.
func countLines(s string, subs ...string) int {
	n := 0
	for _, l := range strings.Split(s, "\n") {
		all := true
		for _, x := range subs {
			if !strings.Contains(l, x) {
				all = false
				break
			}
		}
		if all && l != "" {
			n++
		}
	}
	return n
}
