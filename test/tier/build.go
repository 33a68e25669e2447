// Package tier is what every test tier that runs the real daemon shares: building the daemon
// once, the flags and manifest directory of manifest mode, and the bounded waits. The objects the
// daemon is fed come from test/fixture; the namespaces it runs in from test/lab.
package tier

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// SkipReason says why a kernel tier cannot run here, or "" when it can: NFTPROXY_UNIT_ONLY, not
// root, or one of the extra variables set (NFTPROXY_SKIP_CLUSTER for the cluster tiers). Each
// test still calls netns.Skip; this only saves TestMain a useless build.
func SkipReason(extra ...string) string {
	for _, v := range append([]string{"NFTPROXY_UNIT_ONLY"}, extra...) {
		if os.Getenv(v) != "" {
			return v + " is set"
		}
	}
	if os.Geteuid() != 0 {
		return "not root"
	}
	return ""
}

// Main is a tier's TestMain: unless skip says why not, it builds the daemon into a temporary
// directory, gives its path (and the directory, for more files) to ready, runs the tests and
// removes the directory. It returns the exit code for os.Exit.
func Main(m *testing.M, name, skip string, ready func(daemon, dir string) error) int {
	if skip != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "nftproxy-"+name+"-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin, err := BuildDaemon(dir)
	if err == nil {
		err = ready(bin, dir)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return m.Run()
}

// BuildDaemon compiles this module's nftproxy binary (static, CGO_ENABLED=0) into dir and
// returns its path. It names the package by import path, so it works from any directory inside
// the module.
func BuildDaemon(dir string) (string, error) {
	bin := filepath.Join(dir, "nftproxy")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nftproxy/nftproxy/cmd/nftproxy")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the nftproxy daemon: %w\n%s", err, out)
	}
	return bin, nil
}
