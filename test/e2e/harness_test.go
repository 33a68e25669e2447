package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

const (
	// scenarioTimeout bounds one scenario's probes and waits together, so a broken daemon
	// fails a test instead of hanging the tier.
	scenarioTimeout = 90 * time.Second
	// programTimeout bounds the wait for the daemon to program a change (it syncs at most
	// every 50 ms here).
	programTimeout = 15 * time.Second
	pollInterval   = 50 * time.Millisecond
)

// env is one scenario: a lab, a manifest directory and the daemon watching it in the node.
type env struct {
	t      *testing.T
	lab    *lab.Lab
	dir    string
	ctx    context.Context
	daemon *lab.Process
	// flags are extra daemon flags a scenario adds (e.g. --state-dir).
	flags []string
}

// newEnv builds a lab and writes the Node and the given Services into a fresh manifest
// directory; the daemon is not started yet (see start). Everything is removed when t ends.
func newEnv(t *testing.T, opts lab.Options, services ...fixture.Service) *env {
	t.Helper()
	netns.Skip(t)
	if daemonBinary == "" {
		t.Fatal("daemon binary was not built")
	}
	e := &env{t: t, lab: lab.New(t, opts), dir: t.TempDir()}
	// The lab turns the node's ICMP rate limit off: scenarios send dozens of probes that must be
	// refused from one client at once.
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	t.Cleanup(cancel)
	e.ctx = ctx
	e.writeFile("node.yaml", fixture.LabNode().YAML())
	for _, s := range services {
		e.write(s)
	}
	return e
}

// start runs the daemon in the node and waits until every given Service is programmed.
func (e *env) start(wait ...fixture.Service) {
	e.t.Helper()
	argv := append([]string{daemonBinary, "run"}, tier.ManifestFlags(e.dir)...)
	argv = append(argv, "--min-sync-period", "50ms", "--healthz-bind-address", "", "--metrics-bind-address", "")
	argv = append(argv, e.flags...)
	p, err := e.lab.StartInNode(e.ctx, argv...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.daemon = p
	for _, s := range wait {
		e.waitProgrammed(s)
	}
}

// stop stops the daemon; a non-zero exit after SIGTERM fails the test.
func (e *env) stop() {
	e.t.Helper()
	if e.daemon == nil {
		return
	}
	if err := e.daemon.Stop(); err != nil {
		e.t.Errorf("daemon exit after SIGTERM: %v", err)
	}
	e.daemon = nil
}

// write (re)writes a Service's manifest file (the Service and its EndpointSlices).
func (e *env) write(s fixture.Service) { e.writeFile(s.File(), s.YAML()) }

// writeFile (re)writes a file of the manifest directory atomically.
func (e *env) writeFile(name, content string) {
	e.t.Helper()
	if err := fixture.WriteFile(e.dir, name, content); err != nil {
		e.t.Fatal(err)
	}
}

// ruleset is `nft list ruleset` in the node.
func (e *env) ruleset() string {
	e.t.Helper()
	out, err := e.lab.Ruleset()
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitFor polls the node's ruleset until cond holds, failing the test (with the ruleset and
// the daemon's exit) after programTimeout or if the daemon exits.
func (e *env) waitFor(what string, cond func(ruleset string) bool) {
	e.t.Helper()
	tier.WaitRuleset(e.t, e.ctx, e.lab, e.daemon, programTimeout, pollInterval, what, cond)
}

// waitProgrammed waits until the daemon's ruleset names s (its map elements carry comments
// "namespace/name/proto/port").
func (e *env) waitProgrammed(s fixture.Service) {
	e.t.Helper()
	e.waitFor("Service "+s.Key(), func(rs string) bool { return containsKey(rs, s) })
}

// hostPort is "ip:port" or "[ip6]:port".
func hostPort(a netip.Addr, port uint16) string { return netip.AddrPortFrom(a, port).String() }

// expect is what one probe must produce. For Replied: the backend (one of pods), the port it
// saw the packet arrive on, and the source it saw (one of from).
type expect struct {
	outcome lab.Outcome
	pods    []string
	port    uint16
	from    []netip.Addr
}

// check compares a probe's result with want and reports both on mismatch.
func (w expect) check(t *testing.T, what string, r lab.Result) {
	t.Helper()
	if r.Outcome != w.outcome {
		t.Errorf("%s: got %v, want %v", what, r, w)
		return
	}
	if r.Outcome != lab.Replied {
		return
	}
	if !slices.Contains(w.pods, r.Reply.Pod) || r.Reply.Port != w.port || !slices.Contains(w.from, r.Reply.From.Addr()) {
		t.Errorf("%s: got reply %v, want %v", what, r.Reply, w)
	}
}

func (w expect) String() string {
	if w.outcome != lab.Replied {
		return w.outcome.String()
	}
	return fmt.Sprintf("a reply from one of %v on port %d seeing one of %v", w.pods, w.port, w.from)
}

// replied is the expectation of a reply from one of pods on port, seeing one of from.
func replied(pods []string, port uint16, from ...netip.Addr) expect {
	return expect{outcome: lab.Replied, pods: pods, port: port, from: from}
}

// podNames are "pod-n" for each n.
func podNames(ns ...int) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = fmt.Sprintf("pod-%d", n)
	}
	return out
}
