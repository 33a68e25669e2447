// Package peers runs service proxies side by side against one real API server: nftproxy in
// Kubernetes mode and upstream kube-proxy in nftables and iptables modes, each alone in the node
// namespace of a bench/probe topology. It times them the same way from outside (API write to
// the first packet reaching the new endpoint) and through the sync metrics they all export.
package peers

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// Kind names a peer.
type Kind string

// Peers.
const (
	NFTProxy          Kind = "nftproxy"
	KubeProxyNFTables Kind = "kube-proxy nftables"
	KubeProxyIPTables Kind = "kube-proxy iptables"
	metricsAddr            = "127.0.0.1:10249"
	healthzAddr            = "127.0.0.1:10256"
	syncMetric             = "kubeproxy_sync_proxy_rules_duration_seconds"
	programmingMetric      = "kubeproxy_network_programming_duration_seconds"
	nodeName               = "bench-node"
	outputLimit            = 64 << 10 // bytes kept from the start of a peer's output, and again from its end
)

// Peer is one proxy and its binary.
type Peer struct {
	Kind   Kind
	Binary string
	// Version is the release of a kube-proxy peer ("v1.37.2"), so that two releases of one
	// kind are two peers side by side; empty for nftproxy (the build under test).
	Version string
	// Args are appended to the peer's flags (a later flag wins), e.g. "--v=4" to see each
	// kube-proxy sync's phases in its log, or nftproxy's "--min-sync-period 1s" to compare
	// kube-proxy's fixed period with the default pacing.
	Args []string
}

// Name tells the peer from every other of a campaign: its kind and, for a kube-proxy, its
// release ("kube-proxy nftables v1.37.2").
func (p Peer) Name() string { return peerName(p.Kind, p.Version) }

func peerName(k Kind, version string) string {
	if version == "" {
		return string(k)
	}
	return string(k) + " " + version
}

// args are the peer's flags: same node name and metrics address for all, each peer's default
// sync pacing: kube-proxy's (1.34 and 1.37) minimum sync period is 1 s in both modes (its flag only exists
// for iptables and ipvs), nftproxy's default adapts to what its syncs cost, at most 1 s.
func (p Peer) args(kubeconfig string) []string {
	// kube-proxy logs at -v=2, as it is usually deployed: one line per sync with its size
	// ("Reloading service iptables data" with the numbers of chains and rules) and its time
	// ("SyncProxyRules complete"), no line per Service.
	common := []string{"--kubeconfig", kubeconfig, "--hostname-override", nodeName, "--metrics-bind-address", metricsAddr,
		"--healthz-bind-address", healthzAddr}
	switch p.Kind {
	case NFTProxy:
		return append(append([]string{p.Binary, "run", "--ip-families", "ipv4"}, common...), p.Args...)
	case KubeProxyNFTables, KubeProxyIPTables:
		mode := "nftables"
		if p.Kind == KubeProxyIPTables {
			mode = "iptables"
		}
		return append(append([]string{p.Binary, "--proxy-mode", mode, "--conntrack-max-per-core=0", "--v=2"}, common...), p.Args...)
	}
	return nil
}

// Proc is a running peer.
type Proc struct {
	Peer    Peer
	Started time.Time
	cmd     *exec.Cmd
	out     *limited
	done    chan error
}

// limited keeps the first and the last outputLimit bytes of a process's output: the start says
// how the peer was set up, the end what it was doing when a wait gave up on it.
type limited struct {
	mu         sync.Mutex
	head, tail bytes.Buffer
	dropped    int64 // bytes between head and tail that were not kept
}

func (l *limited) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	if room := outputLimit - l.head.Len(); room > 0 {
		k := min(room, len(p))
		l.head.Write(p[:k])
		p = p[k:]
	}
	l.tail.Write(p)
	if over := l.tail.Len() - outputLimit; over > 0 {
		l.tail.Next(over)
		l.dropped += int64(over)
		if l.tail.Cap() > 4*outputLimit { // keep the buffer from growing with the log
			b := append([]byte(nil), l.tail.Bytes()...)
			l.tail.Reset()
			l.tail.Write(b)
		}
	}
	return n, nil
}

func (l *limited) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped == 0 {
		return l.head.String() + l.tail.String()
	}
	return fmt.Sprintf("%s\n[... %d bytes not kept ...]\n%s", l.head.String(), l.dropped, l.tail.String())
}

// Tail is the end of what the peer logged: its last n bytes, from a line start when possible.
func (pr *Proc) Tail(n int) string {
	pr.out.mu.Lock()
	b := append(append([]byte(nil), pr.out.head.Bytes()...), pr.out.tail.Bytes()...)
	pr.out.mu.Unlock()
	if len(b) <= n {
		return string(b)
	}
	b = b[len(b)-n:]
	if i := bytes.IndexByte(b, '\n'); i >= 0 && i < len(b)-1 {
		b = b[i+1:]
	}
	return string(b)
}

// Start runs p in ns ("ip netns exec" execs the binary, so the pid is the peer's own). When log
// is not nil the peer's whole output is copied to it as well.
func Start(ns *netns.NS, p Peer, kubeconfig string, log io.Writer) (*Proc, error) {
	cmd := ns.Command(p.args(kubeconfig)...)
	pr := &Proc{Peer: p, cmd: cmd, out: &limited{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = pr.out, pr.out
	if log != nil {
		w := io.MultiWriter(pr.out, log)
		cmd.Stdout, cmd.Stderr = w, w
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr.Started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Name(), err)
	}
	go func() { pr.done <- cmd.Wait() }()
	return pr, nil
}

// Exited reports whether the process has ended, with its error.
func (pr *Proc) Exited() (bool, error) {
	select {
	case err := <-pr.done:
		pr.done <- err
		return true, err
	default:
		return false, nil
	}
}

// Output is the start of what the peer logged.
func (pr *Proc) Output() string { return pr.out.String() }

// PeakRSS is the process's peak resident set (VmHWM) in bytes, 0 if unknown.
func (pr *Proc) PeakRSS() int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pr.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Stop sends SIGTERM, waits up to 20 s, then kills. Only this process and its group are
// signalled: the group is killed in any case, because a child the peer was waiting for (kube-proxy's
// iptables-restore, which can run for hours at 10k Services) outlives its parent's exit and
// would otherwise burn a CPU through every later measurement.
func (pr *Proc) Stop() {
	defer func() { _ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL) }()
	if ok, _ := pr.Exited(); ok {
		return
	}
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-pr.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL)
		<-pr.done
	}
}

// Metrics are a scrape: every sample summed over its labels, by name (e.g. "x_sum", "x_count").
type Metrics map[string]float64

// Scrape reads the peer's /metrics from inside ns.
func Scrape(ns *netns.NS) (Metrics, error) {
	out, err := ns.Run("curl", "-sf", "--max-time", "10", "http://"+metricsAddr+"/metrics")
	if err != nil {
		return nil, err
	}
	m := Metrics{}
	for _, line := range strings.Split(out, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		if i := strings.IndexByte(name, '{'); i >= 0 {
			j := strings.LastIndexByte(line, '}')
			name, rest = line[:i], strings.TrimSpace(line[j+1:])
		}
		v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
		if err != nil {
			continue
		}
		m[name] += v
	}
	return m, nil
}

// Syncs is the number of syncs the peer has counted.
func (m Metrics) Syncs() float64 { return m[syncMetric+"_count"] }

// delta is the mean of a histogram's observations between two scrapes, and their number.
func delta(before, after Metrics, name string) (time.Duration, int) {
	n := after[name+"_count"] - before[name+"_count"]
	if n <= 0 {
		return 0, 0
	}
	return time.Duration((after[name+"_sum"] - before[name+"_sum"]) / n * float64(time.Second)), int(n)
}
