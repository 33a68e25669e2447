package ruleset

import (
	"testing"

	"github.com/nftproxy/nftproxy/test/deps"
)

// TestBuilderStaysPure: the builder is a pure function of the model; it must not link the
// stateful reconciler, the proxier that drives it, nor the daemon's metrics. What the builder
// hands the reconciler (proxy/fragment) is a leaf both import.
func TestBuilderStaysPure(t *testing.T) {
	deps.Forbid(t, "proxy/ruleset",
		"the builder must stay pure: put what both sides need in a leaf (as proxy/fragment)",
		"proxy/reconciler", "proxy/proxier", "metrics")
}
