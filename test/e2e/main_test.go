package e2e

import (
	"os"
	"testing"

	"github.com/nftproxy/nftproxy/test/tier"
)

// daemonBinary is the nftproxy binary TestMain builds once for every scenario; empty when the
// tier is skipped (not root, or NFTPROXY_UNIT_ONLY set).
var daemonBinary string

func TestMain(m *testing.M) {
	os.Exit(tier.Main(m, "e2e", tier.SkipReason(), func(bin, _ string) error {
		daemonBinary = bin
		return nil
	}))
}
