package controller

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependenciesStayOffTheDataPlane: the controller runs in its own Deployment with patch
// rights on every Service; it must not link the node's data plane (the kernel interface, the
// ruleset builder, the reconciler, the proxier) nor the daemon's metrics hub that would pull them
// in. Dependencies point one way: the data plane may use the allocator, never the reverse. The
// list comes from `go list`, so a new import anywhere below the controller is caught.
func TestDependenciesStayOffTheDataPlane(t *testing.T) {
	const module = "github.com/nftproxy/nftproxy/"
	forbidden := []string{"nft", "proxy/proxier", "proxy/reconciler", "proxy/ruleset", "metrics"}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the controller's dependencies: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != module+"allocator/controller" {
		t.Fatalf("go list -deps did not list the controller last; got %v", deps)
	}
	for _, d := range deps {
		rel, ok := strings.CutPrefix(d, module)
		if !ok {
			continue
		}
		for _, f := range forbidden {
			if rel == f || strings.HasPrefix(rel, f+"/") {
				t.Errorf("allocator/controller depends on %s; move what it needs into a package of the allocator side (or a leaf both sides import)", d)
			}
		}
	}
}
