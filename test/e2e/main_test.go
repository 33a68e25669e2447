package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/nftproxy/nftproxy/test/lab"
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
	bin, err := lab.BuildDaemon(dir)
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
