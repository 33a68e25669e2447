package cluster

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestStopKillsASlowServerWithoutError: a server that ignores SIGTERM past its grace period is
// killed and stop reports that (callers log it), and one that exits on SIGTERM is not killed.
// A busy machine makes kube-apiserver slow to stop; that must never fail a test.
func TestStopKillsASlowServerWithoutError(t *testing.T) {
	for _, c := range []struct {
		name       string
		script     string
		wantKilled bool
	}{
		{"ignores SIGTERM", `trap "" TERM; printf 'st%s\n' arted; while :; do sleep 1; done`, true},
		{"exits on SIGTERM", `printf 'st%s\n' arted; exec sleep 60`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := &process{name: "server", path: "/bin/sh", args: []string{"-c", c.script}, logFile: filepath.Join(t.TempDir(), "log")}
			if err := p.start(); err != nil {
				t.Fatal(err)
			}
			// Wait for the script to have set its trap (it echoes after): bounded by the
			// test's timeout, not asserted on.
			for !strings.Contains(p.tail(1), "started") {
				time.Sleep(10 * time.Millisecond)
			}
			if killed := p.stop(200 * time.Millisecond); killed != c.wantKilled {
				t.Errorf("stop reported killed=%v, want %v", killed, c.wantKilled)
			}
			if p.running() {
				t.Error("running after stop")
			}
			if got := p.slowStop(time.Second); !strings.Contains(got, "killed") || !strings.Contains(got, "server") {
				t.Errorf("slowStop = %q, want it to name the server and say it was killed", got)
			}
		})
	}
}
