// Package netns gives tests a private network namespace of their own: created fresh, named so
// that `ip netns exec` and `nft` can reach it, and removed when the test ends, failed or not.
// Nothing a test does inside it touches the host's namespace.
package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// NS is one named network namespace.
type NS struct {
	Name string
	file *os.File
	// path is set for a namespace this package did not create (Open): Command enters it
	// with nsenter, and Close leaves it alone.
	path string
}

// Open wraps a network namespace someone else owns, such as a container's
// (/proc/PID/ns/net), so Do, Fd, Command and the lab's probes work in it. Close releases the
// handle only; the namespace lives as long as its owner.
func Open(name, path string) (*NS, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	return &NS{Name: name, file: f, path: path}, nil
}

// Skip skips t unless the process can create network namespaces (root with CAP_SYS_ADMIN) and
// the `ip` command exists, or when NFTPROXY_UNIT_ONLY is set (`make unit`). Tests that touch the
// kernel call it first, so `go test` as a normal user still runs the pure tests.
func Skip(t testing.TB) {
	t.Helper()
	if os.Getenv("NFTPROXY_UNIT_ONLY") != "" {
		t.Skip("NFTPROXY_UNIT_ONLY is set: kernel tiers skipped")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command (iproute2)")
	}
}

// New creates a namespace named "<prefix>-<random>" with loopback up and registers its removal
// with t.Cleanup.
func New(t testing.TB, prefix string) *NS {
	t.Helper()
	Skip(t)
	ns, err := Create(prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ns.Close(); err != nil {
			t.Errorf("remove netns %s: %v", ns.Name, err)
		}
	})
	return ns
}

// Create makes a namespace without a testing.T (for benchmarks, demos and the lab). The caller
// must Close it.
func Create(prefix string) (*NS, error) {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	name := prefix + "-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	f, err := os.Open("/run/netns/" + name)
	if err != nil {
		_ = exec.Command("ip", "netns", "del", name).Run()
		return nil, fmt.Errorf("open netns %s: %w", name, err)
	}
	ns := &NS{Name: name, file: f}
	if _, err := ns.Run("ip", "link", "set", "lo", "up"); err != nil {
		_ = ns.Close()
		return nil, err
	}
	return ns, nil
}

// Fd is the namespace's file descriptor, for netlink connections (netlink.Config.NetNS).
func (ns *NS) Fd() int { return int(ns.file.Fd()) }

// Command returns a command that runs argv inside the namespace.
func (ns *NS) Command(argv ...string) *exec.Cmd {
	if ns.path != "" {
		return exec.Command("nsenter", append([]string{"--net=" + ns.path, "--"}, argv...)...)
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name}, argv...)...)
}

// Run runs argv inside the namespace and returns its standard output. The error carries
// standard error.
func (ns *NS) Run(argv ...string) (string, error) { return ns.RunStdin("", argv...) }

// RunStdin is Run with stdin fed from in (e.g. `nft -f -`).
func (ns *NS) RunStdin(in string, argv ...string) (string, error) {
	cmd := ns.Command(argv...)
	if in != "" {
		cmd.Stdin = strings.NewReader(in)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("netns %s: %s: %v: %s", ns.Name, strings.Join(argv, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// Do runs fn on an OS thread switched into the namespace. Sockets fn opens stay in the namespace
// after Do returns, so a test can listen or dial "inside" a namespace from its own process.
func (ns *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked: if switching back fails it must not run other goroutines,
		// and a locked goroutine's thread exits with it.
		runtime.LockOSThread()
		orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Setns(ns.Fd(), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns.Name, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns back from %s: %w", ns.Name, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// Close removes the namespace. Processes still running in it keep it alive until they exit.
func (ns *NS) Close() error {
	if ns.file != nil {
		ns.file.Close()
		ns.file = nil
	}
	if ns.path != "" {
		return nil
	}
	if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip netns del %s: %v: %s", ns.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}
