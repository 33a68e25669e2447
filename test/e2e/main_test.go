package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// daemonBinary is the nftproxy binary TestMain builds once for every scenario; empty when the
// tier is skipped (not root, or NFTPROXY_UNIT_ONLY set).
var daemonBinary string

// skipReason says why the tier cannot run here, or "" when it can. netns.Skip gives each test
// the same verdict; TestMain only uses it to avoid a useless build.
func skipReason() string {
	if os.Getenv("NFTPROXY_UNIT_ONLY") != "" {
		return "NFTPROXY_UNIT_ONLY is set"
	}
	if os.Geteuid() != 0 {
		return "not root"
	}
	return ""
}

func TestMain(m *testing.M) {
	if skipReason() != "" {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "nftproxy-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	bin, err := buildDaemon(dir)
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	daemonBinary = bin
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// buildDaemon compiles ./cmd/nftproxy of this module into dir and returns the binary's path.
// The module root comes from `go env GOMOD`, so the test runs from any working directory.
func buildDaemon(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: not inside the nftproxy module")
	}
	bin := filepath.Join(dir, "nftproxy")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/nftproxy")
	cmd.Dir = filepath.Dir(gomod)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the daemon: %w\n%s", err, out)
	}
	return bin, nil
}
