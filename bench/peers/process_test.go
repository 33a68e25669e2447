package peers

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOutputKeepsHeadAndTail: a peer that logs more than the limit keeps its start (flags, set-up)
// and its end (what it was doing when a wait gave up), and says how much was left out.
func TestOutputKeepsHeadAndTail(t *testing.T) {
	l := &limited{}
	pr := &Proc{out: l}
	l.Write([]byte("first line\n"))
	for i := 0; i < 5000; i++ {
		l.Write([]byte(strings.Repeat("x", 99) + "\n"))
	}
	l.Write([]byte("last line\n"))
	s := pr.Output()
	if !strings.HasPrefix(s, "first line\n") || !strings.HasSuffix(s, "last line\n") {
		t.Errorf("output does not keep both ends: starts %q, ends %q", s[:20], s[len(s)-20:])
	}
	if !strings.Contains(s, "bytes not kept") {
		t.Error("output does not say that bytes were left out")
	}
	if len(s) > 2*outputLimit+100 {
		t.Errorf("output kept %d bytes, want at most about %d", len(s), 2*outputLimit)
	}
	if got := pr.Tail(30); got != "last line\n" {
		t.Errorf("Tail(30) = %q, want the last whole line", got)
	}
	if got := lastLines("a\n\nb\nc\n", 2); strings.Join(got, "|") != "b|c" {
		t.Errorf("lastLines = %q", got)
	}
	klog := "I1125 14:34:53.741521    2640 proxier.go:1484] \"Reloading service iptables data\" numNATChains=123909\n"
	if got := lastLines(klog, 1); len(got) != 1 || got[0] != `"Reloading service iptables data" numNATChains=123909` {
		t.Errorf("lastLines of a klog line = %q, want the message only", got)
	}
}

// startLocal runs argv as a peer would be run (its own process group), without a namespace.
func startLocal(t *testing.T, argv ...string) *Proc {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	pr := &Proc{Peer: Peer{Kind: "test peer"}, cmd: cmd, out: &limited{}, done: make(chan error, 1), Started: time.Now()}
	cmd.Stdout, cmd.Stderr = pr.out, pr.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { pr.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	return pr
}

// TestDiagnoseAndStopChildren: a wait that gives up names the child the peer is waiting for
// (as kube-proxy waits for iptables-restore), and Stop leaves no child of the peer running.
func TestDiagnoseAndStopChildren(t *testing.T) {
	if _, err := exec.LookPath("sleep"); err != nil {
		t.Skip("no sleep command")
	}
	// The child reads one line of its input file, then waits, as iptables-restore sits in its input.
	in := filepath.Join(t.TempDir(), "input")
	if err := os.WriteFile(in, []byte("hello\nworld\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	pr := startLocal(t, "sh", "-c", "trap 'exit 0' TERM; echo starting; echo restoring 123 chains; { read l; exec sleep 60; } <"+in+" >/dev/null 2>&1 & wait")
	var kids []Child
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if kids = pr.Children(); len(kids) == 1 && kids[0].Command == "sleep 60" && strings.Contains(pr.Output(), "restoring") {
			break
		}
	}
	if len(kids) != 1 || kids[0].Command != "sleep 60" {
		t.Fatalf("children = %v, want the one sleep 60", kids)
	}
	if kids[0].Read != 6 || kids[0].Input != 12 {
		t.Errorf("child at byte %d of %d of its input, want 6 of 12", kids[0].Read, kids[0].Input)
	}
	d := pr.Diagnose(1)
	for _, want := range []string{"test peer running for", "waiting for: sleep 60 (pid ", "last log lines: restoring 123 chains"} {
		if !strings.Contains(d, want) {
			t.Errorf("Diagnose = %q, want it to contain %q", d, want)
		}
	}
	pr.Stop()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := syscall.Kill(kids[0].Pid, 0)
		if errors.Is(err, syscall.ESRCH) {
			break
		}
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(kids[0].Pid) + "/stat"); strings.Contains(string(b), ") Z ") {
			break // killed, waiting to be reaped by init
		}
		if time.Now().After(deadline) {
			t.Fatalf("the peer's child (pid %d) still runs after Stop", kids[0].Pid)
		}
	}
}
