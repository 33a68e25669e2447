package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one server the cluster runs (etcd, kube-apiserver). Output is appended to logFile
// across restarts, so a failing test can show what the server said.
type process struct {
	name    string
	path    string
	args    []string
	logFile string

	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when cmd has been waited for
	err    error         // cmd.Wait's result, valid once exited is closed
}

// start launches the process. It dies with the test binary (Pdeathsig) even if cleanup never
// runs.
func (p *process) start() error {
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	log, err := os.OpenFile(p.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "=== %s %s\n", time.Now().Format(time.RFC3339), strings.Join(p.args, " "))
	cmd := exec.Command(p.path, p.args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	p.cmd, p.log, p.exited = cmd, log, make(chan struct{})
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return nil
}

// running reports whether the process was started and has not exited.
func (p *process) running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM, waits up to grace, then kills the process group, and returns once the
// process has exited. It reports whether it had to kill: a server slow to stop (a busy machine,
// open watches) is stopped all the same, so callers log that and never fail on it. Stopping a
// stopped process is a no-op.
func (p *process) stop(grace time.Duration) (killed bool) {
	if p.cmd == nil {
		return false
	}
	defer func() {
		p.log.Close()
		p.cmd = nil
	}()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return false
	case <-time.After(grace):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
	return true
}

// slowStop is the log line for a process stop had to kill.
func (p *process) slowStop(grace time.Duration) string {
	return fmt.Sprintf("%s did not stop within %s after SIGTERM (a busy machine or open watches); killed", p.name, grace)
}

// waitReady polls ready until it reports nil, the process exits, or ctx ends. The error names
// the last failure and ends with the tail of the log.
func (p *process) waitReady(ctx context.Context, ready func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before it was ready (%v)\n%s", p.name, p.err, p.tail(40))
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w (last: %v)\n%s", p.name, ctx.Err(), last, p.tail(40))
		case <-tick.C:
		}
	}
}

// tail returns the last n lines of the log.
func (p *process) tail(n int) string {
	b, err := os.ReadFile(p.logFile)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- last lines of %s:\n%s", p.logFile, bytes.Join(lines, []byte("\n")))
}

// addrInUse reports whether the log says the last start failed to bind; the caller then picks
// new ports (another process may take a free port between freePorts and the bind).
func (p *process) addrInUse() bool {
	b, _ := os.ReadFile(p.logFile)
	return bytes.Contains(b, []byte("address already in use"))
}

// freePorts returns n distinct TCP ports free on 127.0.0.1 right now.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// hostPort joins 127.0.0.1 and port.
func hostPort(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

var errNotReady = errors.New("not ready")
