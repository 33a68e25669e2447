package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// stopGrace is how long Stop waits after SIGTERM before it logs the process as slow; stopHang
// how long more before it kills it as hung.
const (
	stopGrace = 5 * time.Second
	stopHang  = 5 * time.Minute
)

// Process is a command running in a lab namespace (typically the nftproxy daemon in the node).
// Its output is kept and, line by line, sent to the lab's log.
type Process struct {
	name   string
	cmd    *exec.Cmd
	cancel context.CancelFunc
	out    *logWriter
	done   chan struct{}
	err    error // set before done closes
}

// StartInNode starts argv in the node namespace. The lab stops it on Close; a test may Stop it
// earlier (e.g. to restart the daemon). Cancelling ctx stops it too.
func (l *Lab) StartInNode(ctx context.Context, argv ...string) (*Process, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errors.New("lab is closed")
	}
	p, err := Start(ctx, l.Node, l.logf, argv...)
	if err != nil {
		return nil, err
	}
	l.procs = append(l.procs, p)
	return p, nil
}

// Start starts argv in ns, sending each output line to logf prefixed with the program's name.
// Stop it with Stop.
func Start(ctx context.Context, ns *netns.NS, logf func(string, ...any), argv ...string) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("start: empty command")
	}
	ctx, cancel := context.WithCancel(ctx)
	name := filepath.Base(argv[0])
	cmd := ns.Command(argv...)
	cmd.WaitDelay = stopGrace
	out := &logWriter{prefix: name + ": ", logf: logf}
	cmd.Stdout, cmd.Stderr = out, out
	p := &Process{name: name, cmd: cmd, cancel: cancel, out: out, done: make(chan struct{})}
	// The command comes from ns.Command, not exec.CommandContext, so ctx is watched below.
	// `ip netns exec` execs the program: the pid and the signals are the program's own.
	if err := cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("start %s in %s: %w", strings.Join(argv, " "), ns.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		out.flush()
		close(p.done)
	}()
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
				return
			case <-time.After(stopGrace):
			}
			// Slow is not broken: a busy machine delays the exit. Only a process that
			// ignores SIGTERM for stopHang more is killed (and its exit status says so).
			logf("%s still running %s after SIGTERM (a busy machine?); killing it in %s if it does not exit", name, stopGrace, stopHang)
			select {
			case <-p.done:
			case <-time.After(stopHang):
				_ = cmd.Process.Kill()
			}
		case <-p.done:
		}
	}()
	return p, nil
}

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is the exit error once Done is closed (nil for exit status 0).
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Stop sends SIGTERM, waits for the exit (logging a slow one, killing one that hangs) and
// returns the exit error. Stopping a stopped process returns its exit error again.
func (p *Process) Stop() error {
	p.cancel()
	<-p.done
	return p.err
}

// Output is everything the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.out.String() }

// logWriter keeps output and forwards complete lines to logf.
type logWriter struct {
	prefix string
	logf   func(string, ...any)

	mu      sync.Mutex
	all     bytes.Buffer
	partial []byte
}

func (w *logWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(b)
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.logf("%s%s", w.prefix, w.partial[:i])
		w.partial = w.partial[i+1:]
	}
	return len(b), nil
}

func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.logf("%s%s", w.prefix, w.partial)
		w.partial = nil
	}
}

func (w *logWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// Nft runs the nft CLI in the node namespace, e.g. Nft("list", "table", "ip", "nftproxy").
func (l *Lab) Nft(args ...string) (string, error) {
	return l.Node.Run(append([]string{"nft"}, args...)...)
}

// NftApply loads an nft script into the node namespace (`nft -f -`), as one transaction.
func (l *Lab) NftApply(script string) error {
	_, err := l.Node.RunStdin(script, "nft", "-f", "-")
	return err
}

// Ruleset is `nft list ruleset` in the node namespace.
func (l *Lab) Ruleset() (string, error) { return l.Nft("list", "ruleset") }

// RulesetJSON is `nft -j list ruleset` in the node namespace.
func (l *Lab) RulesetJSON() ([]byte, error) {
	out, err := l.Nft("-j", "list", "ruleset")
	return []byte(out), err
}

// Conntrack is `conntrack -L` in the node namespace with extra filter arguments, e.g.
// Conntrack("-p", "udp", "--orig-dst", "198.19.0.1"). One entry per line.
func (l *Lab) Conntrack(args ...string) (string, error) {
	return l.Node.Run(append([]string{"conntrack", "-L"}, args...)...)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
