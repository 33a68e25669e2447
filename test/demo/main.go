// Command demo is `make demo`: it builds a cluster node out of network namespaces (test/lab),
// runs nftproxy in it on the example manifests, sends real TCP and UDP traffic at every
// Service the examples define (and at addresses and ports they must NOT open), prints what
// reached which pod and what the pod saw, shows an excerpt of the ruleset and the daemon's sync
// metrics, and removes everything it created.
//
// It exits 0 only when every probe did what the examples promise, so it doubles as a smoke
// test. Everything happens in namespaces it creates; the caller's namespace is not touched.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
)

// config is what the flags set.
type config struct {
	binary    string
	manifests string
	verbose   bool
	timeout   time.Duration
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the whole demo; its result is the exit status. Every path out of it after the lab
// exists goes through the lab's Close.
func run(args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.binary, "nftproxy", "bin/nftproxy", "the nftproxy binary to run in the lab's node (make build writes it)")
	fs.StringVar(&c.manifests, "manifests", "deploy/examples", "directory of Service, EndpointSlice and Node manifests for the daemon")
	fs.BoolVar(&c.verbose, "v", false, "stream the lab's set-up notes and the daemon's log to stderr")
	fs.DurationVar(&c.timeout, "timeout", 90*time.Second, "upper bound on the whole demo, teardown excluded")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "demo: needs root: it creates network namespaces and programs nftables inside them (try: sudo make demo)")
		return 1
	}
	var err error
	if c.binary, err = usablePath(c.binary, false); err != nil {
		fmt.Fprintf(stderr, "demo: -nftproxy: %v (run make build first)\n", err)
		return 1
	}
	if c.manifests, err = usablePath(c.manifests, true); err != nil {
		fmt.Fprintf(stderr, "demo: -manifests: %v\n", err)
		return 1
	}

	base, interrupt := context.WithCancelCause(context.Background())
	defer interrupt(nil)
	ctx, cancel := context.WithTimeoutCause(base, c.timeout, fmt.Errorf("the demo ran longer than -timeout %v", c.timeout))
	defer cancel()
	stopSignals := cancelOnSignal(interrupt, stderr)
	defer stopSignals()

	d := &demo{cfg: c, out: stdout, errOut: stderr, start: time.Now()}
	ok := d.run(ctx)
	if ctx.Err() != nil && !ok {
		fmt.Fprintf(stdout, "\ndemo: stopped early (%v)\n", context.Cause(ctx))
	}
	if !d.teardown() {
		ok = false
	}
	fmt.Fprintf(stdout, "runtime: %v\n", time.Since(d.start).Round(100*time.Millisecond))
	if !ok {
		return 1
	}
	return 0
}

// usablePath makes p absolute (the daemon runs through `ip netns exec`) and checks that it is a
// directory or a regular file, as wanted.
func usablePath(p string, dir bool) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if st.IsDir() != dir {
		if dir {
			return "", fmt.Errorf("%s is not a directory", abs)
		}
		return "", fmt.Errorf("%s is a directory, want the binary", abs)
	}
	return abs, nil
}

// cancelOnSignal cancels the demo on the first SIGINT or SIGTERM; later signals only say that
// teardown is under way, so a second Ctrl-C cannot leave namespaces behind. The returned
// function stops listening.
func cancelOnSignal(cancel context.CancelCauseFunc, stderr io.Writer) func() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		first := true
		for {
			select {
			case s := <-sigs:
				if first {
					fmt.Fprintf(stderr, "\ndemo: %v: stopping and tearing the lab down\n", s)
					cancel(fmt.Errorf("%v received", s))
					first = false
				} else {
					fmt.Fprintln(stderr, "demo: teardown under way (bounded, a few seconds)")
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sigs)
		close(done)
	}
}

// demo holds the lab and the daemon across the steps.
type demo struct {
	cfg    config
	out    io.Writer
	errOut io.Writer
	start  time.Time

	lab    *lab.Lab
	daemon *lab.Process
}

// podPorts are what every pod serves: the web target port, the RTP range with one port on each
// side of it (so a packet wrongly forwarded outside the range would be answered, not refused),
// and a few ports for the all-ports Service (which the node itself does not serve, so a
// forwarded node-IP packet would be answered too).
var podPorts = []lab.PortSpec{
	lab.Port(8080),
	{Proto: "udp", First: rtpFirst - 1, Last: rtpLast + 1},
	lab.Port(22), lab.Port(443), lab.Port(5060), lab.Port(40000),
}

// run does everything but the teardown and reports whether every probe went as expected.
func (d *demo) run(ctx context.Context) bool {
	logf := func(string, ...any) {}
	if d.cfg.verbose {
		logf = func(format string, args ...any) { fmt.Fprintf(d.errOut, "  | "+format+"\n", args...) }
	}
	step := time.Now()
	l, err := lab.Build(lab.Options{Prefix: "nftp-demo", Clients: 1, Pods: 2, Ports: podPorts, Logf: logf})
	if err != nil {
		fmt.Fprintf(d.errOut, "demo: build the lab: %v\n", err)
		return false
	}
	d.lab = l
	fmt.Fprintf(d.out, "lab %s: node, gateway, client-1, pod-1, pod-2 in %v (br_netfilter: %v)\n",
		l.Prefix, time.Since(step).Round(time.Millisecond), l.BridgeNetfilter)

	step = time.Now()
	if err := d.startDaemon(ctx); err != nil {
		fmt.Fprintf(d.errOut, "demo: %v\n", err)
		d.daemonTail()
		return false
	}
	fmt.Fprintf(d.out, "nftproxy: rules for %s programmed %v after start\n\n", d.cfg.manifests, time.Since(step).Round(time.Millisecond))

	probes := d.probes()
	step = time.Now()
	results := runProbes(ctx, probes)
	if ctx.Err() != nil {
		return false
	}
	fmt.Fprintf(d.out, "traffic (%v):\n", time.Since(step).Round(time.Millisecond))
	passed, total, conns := printTable(d.out, probes, results)

	fmt.Fprintln(d.out)
	d.printRuleset()
	fmt.Fprintln(d.out)
	d.printMetrics(ctx)
	fmt.Fprintln(d.out)

	ok := passed == total
	verdict := "every probe as the examples promise"
	if !ok {
		verdict = "FAILED: see the rows marked FAIL"
		d.daemonTail()
	}
	fmt.Fprintf(d.out, "summary: %d of %d probes (%d connections and UDP exchanges) as expected: %s\n", passed, total, conns, verdict)
	return ok
}

// daemonTail prints the end of the daemon's log, for failures.
func (d *demo) daemonTail() {
	if d.daemon == nil || d.cfg.verbose {
		return
	}
	lines := strings.Split(strings.TrimRight(d.daemon.Output(), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	fmt.Fprintln(d.errOut, "nftproxy log (last lines):")
	for _, s := range lines {
		fmt.Fprintln(d.errOut, "  "+s)
	}
}

// teardown stops the daemon, removes every namespace of the lab and checks that none is left.
func (d *demo) teardown() bool {
	if d.lab == nil {
		return true
	}
	prefix := d.lab.Prefix
	if err := d.lab.Close(); err != nil {
		fmt.Fprintf(d.errOut, "demo: teardown: %v\n", err)
		return false
	}
	left, err := leftNamespaces(prefix)
	if err != nil {
		fmt.Fprintf(d.errOut, "demo: teardown check: %v\n", err)
		return false
	}
	if len(left) > 0 {
		fmt.Fprintf(d.out, "teardown: namespaces left behind: %s\n", strings.Join(left, " "))
		return false
	}
	fmt.Fprintf(d.out, "teardown: daemon stopped, lab namespaces removed (ip netns list shows no %s-*); the demo created nothing outside them\n", prefix)
	return true
}
