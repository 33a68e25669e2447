package controller

import (
	"testing"

	"github.com/nftproxy/nftproxy/test/deps"
)

// TestDependenciesStayOffTheDataPlane: the controller runs in its own Deployment with patch
// rights on every Service; it must not link the node's data plane (the kernel interface, the
// ruleset builder, the reconciler, the proxier) nor the daemon's metrics hub that would pull them
// in. Dependencies point one way: the data plane may use the allocator, never the reverse.
func TestDependenciesStayOffTheDataPlane(t *testing.T) {
	deps.Forbid(t, "allocator/controller",
		"move what it needs into a package of the allocator side (or a leaf both sides import)",
		"nft", "proxy/proxier", "proxy/reconciler", "proxy/ruleset", "metrics")
}
