package soak

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
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
	e.writeFile("node.yaml", nodeYAML())
	return e
}

// flags are the daemon's lab flags (pod and service CIDRs, the node name, the manifests).
func (e *env) flags() []string {
	return []string{"--manifests", e.dir, "--node-name", nodeName,
		"--cluster-cidr", lab.PodCIDRv4 + "," + lab.PodCIDRv6,
		"--service-cidr", lab.ServiceCIDRv4 + "," + lab.ServiceCIDRv6}
}

// writeFile (re)writes a manifest atomically: the daemon never reads half a file.
func (e *env) writeFile(name, content string) {
	e.t.Helper()
	if err := writeAtomic(e.dir, name, content); err != nil {
		e.t.Fatal(err)
	}
}

func writeAtomic(dir, name, content string) error {
	tmp := filepath.Join(dir, ".tmp-"+name)
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// write writes s's Service and EndpointSlice files.
func (e *env) write(ss ...service) {
	e.t.Helper()
	for _, s := range ss {
		e.writeFile(s.serviceFile(), s.serviceYAML())
		if s.endpoints != nil {
			e.writeFile(s.sliceFile(), s.slicesYAML(0))
		}
	}
}

// daemon is one nftproxy process in the node. Unlike lab.Process it can be SIGKILLed and
// exposes its pid (for /proc figures); its log is kept, not streamed (churn logs a lot).
type daemon struct {
	name    string
	cmd     *exec.Cmd
	out     *syncBuffer
	done    chan struct{}
	err     error
	metrics string // address of its /metrics in the node
	started time.Time
}

// syncBuffer is a bytes.Buffer safe for the process's writers and the test's readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs `bin run` with the lab flags plus extra, metrics on metricsAddr. The daemon is
// killed when the test ends if it is still running; its log goes to the test log on failure.
func (e *env) start(name, bin, metricsAddr, healthzAddr string, extra ...string) *daemon {
	e.t.Helper()
	argv := append([]string{bin, "run"}, e.flags()...)
	argv = append(argv, "--metrics-bind-address", metricsAddr, "--healthz-bind-address", healthzAddr)
	argv = append(argv, extra...)
	d := &daemon{name: name, out: &syncBuffer{}, done: make(chan struct{}), metrics: metricsAddr}
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

// term sends SIGTERM and waits (bounded) for the exit; it returns the exit error, or an error
// if the daemon had to be killed.
func (d *daemon) term() error {
	if !d.running() {
		return fmt.Errorf("%s had already exited: %v", d.name, d.err)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		return d.err
	case <-time.After(10 * time.Second):
		d.kill()
		return fmt.Errorf("%s did not exit within 10s of SIGTERM", d.name)
	}
}

// pid is the daemon's process id (`ip netns exec` execs it, so it is the command's pid).
func (d *daemon) pid() int { return d.cmd.Process.Pid }

// peakRSS is the daemon's VmHWM from /proc, e.g. "61234 kB"; read it while it runs.
func (d *daemon) peakRSS() string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.pid()))
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

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
		return m.value("nftproxy_last_sync_timestamp_seconds") > 0, nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %s's first sync: %v (last scrape error: %v)", d.name, err, last)
	}
	return time.Since(d.started)
}

// poll calls cond every pollInterval until it returns true (nil), returns an error (that
// error), or limit passes.
func (e *env) poll(limit time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not true after %v", limit)
		}
		select {
		case <-e.ctx.Done():
			return e.ctx.Err()
		case <-time.After(pollInterval):
		}
	}
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
