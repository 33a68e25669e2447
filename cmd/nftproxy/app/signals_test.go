package app

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

// builtDaemon is the nftproxy binary, built once for the tests that send it signals or watch it
// exit; its directory is removed by TestMain.
var builtDaemon struct {
	once     sync.Once
	dir, bin string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtDaemon.dir != "" {
		os.RemoveAll(builtDaemon.dir)
	}
	os.Exit(code)
}

// daemonBinary builds the binary on first use.
func daemonBinary(t *testing.T) string {
	t.Helper()
	b := &builtDaemon
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "nftproxy-app-"); b.err == nil {
			b.bin, b.err = tier.BuildDaemon(b.dir)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// lockedBuffer is a daemon's stderr, read while it runs.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The built daemon, sent every signal it may get: SIGHUP repairs drift at once (drift events
// and the periodic resync are off, so nothing else would), SIGUSR1, SIGUSR2, SIGALRM and SIGPIPE
// are logged and change nothing, and only SIGTERM stops it, with exit 0 and the rules left in
// place. Before, SIGHUP ended the process silently and the others went unlogged.
func TestDaemonSignals(t *testing.T) {
	netns.Skip(t)
	ns := netns.New(t, "nftp-signals")
	bin := daemonBinary(t)
	cmd := ns.Command(bin, "run", "--manifests", exampleDir(t), "--node-name", "node-a",
		"--healthz-bind-address", "", "--metrics-bind-address", "", "--drift-events=false", "--full-sync-period", "24h")
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	ctx := context.Background()
	const limit, every = 60 * time.Second, 50 * time.Millisecond
	alive := func() bool {
		select {
		case err := <-exited:
			exited <- err
			return false
		default:
			return true
		}
	}
	services := func() (bool, string) {
		out, err := ns.Run("nft", "list", "chain", "ip", "nftproxy", "services")
		return err == nil && strings.Contains(out, "vmap @service-ips"), out
	}
	running := func() (bool, string) {
		if !alive() {
			t.Fatalf("the daemon exited: %s", log.String())
		}
		return services()
	}
	tier.Until(t, ctx, limit, every, "first sync", running)

	if _, err := ns.Run("nft", "flush", "chain", "ip", "nftproxy", "services"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := services(); ok {
		t.Fatal("the flush did not empty the services chain")
	}
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	tier.Until(t, ctx, limit, every, "SIGHUP's full resync repairing the flushed chain", running)
	if !strings.Contains(log.String(), "full resync") {
		t.Errorf("SIGHUP not logged: %s", log.String())
	}

	for _, sig := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGPIPE} {
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		tier.Until(t, ctx, limit, every, "log of "+sig.String(), func() (bool, string) {
			if !alive() {
				t.Fatalf("%v ended the daemon: %s", sig, log.String())
			}
			return strings.Contains(log.String(), `"signal received and ignored`) && strings.Contains(log.String(), `signal="`+sig.String()+`"`), log.String()
		})
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("exit after SIGTERM: %v: %s", err, log.String())
		}
	case <-time.After(limit):
		t.Fatalf("no exit %v after SIGTERM: %s", limit, log.String())
	}
	if !strings.Contains(log.String(), "stopping; the rules stay") {
		t.Errorf("SIGTERM not logged: %s", log.String())
	}
	if ok, out := services(); !ok {
		t.Errorf("the rules did not stay after SIGTERM: %s", out)
	}
}

// A log reader that goes away (the daemon's stderr a pipe whose reader closed) must not end the
// daemon: every later log line raises SIGPIPE, which by default ends a Go program writing to
// fd 2. The daemon goes on repairing drift on SIGHUP, seen in the kernel since no log is left.
func TestDaemonSurvivesClosedLog(t *testing.T) {
	netns.Skip(t)
	ns := netns.New(t, "nftp-sigpipe")
	bin := daemonBinary(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(bin, "run", "--manifests", exampleDir(t), "--node-name", "node-a",
		"--healthz-bind-address", "", "--metrics-bind-address", "", "--drift-events=false", "--full-sync-period", "24h", "-v", "2")
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	ctx := context.Background()
	const limit, every = 60 * time.Second, 50 * time.Millisecond
	running := func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the daemon exited: %v", err)
		default:
		}
		out, err := ns.Run("nft", "list", "chain", "ip", "nftproxy", "services")
		return err == nil && strings.Contains(out, "vmap @service-ips"), out
	}
	tier.Until(t, ctx, limit, every, "first sync", running)
	r.Close() // the log's reader goes away
	for i := 0; i < 2; i++ {
		if _, err := ns.Run("nft", "flush", "chain", "ip", "nftproxy", "services"); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		tier.Until(t, ctx, limit, every, "SIGHUP's repair with the log closed", running)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("exit after SIGTERM with the log closed: %v", err)
		}
	case <-time.After(limit):
		t.Fatalf("no exit %v after SIGTERM", limit)
	}
}
