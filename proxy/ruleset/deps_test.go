package ruleset

import (
	"os/exec"
	"strings"
	"testing"
)

// TestBuilderStaysPure: the builder is a pure function of the model; it must not link the
// stateful reconciler, the proxier that drives it, nor the daemon's metrics. What the builder
// hands the reconciler (proxy/fragment) is a leaf both import. The list comes from `go list`, so
// a new import anywhere below the builder is caught.
func TestBuilderStaysPure(t *testing.T) {
	const module = "github.com/nftproxy/nftproxy/"
	forbidden := []string{"proxy/reconciler", "proxy/proxier", "metrics"}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list the builder's dependencies: %v", err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != module+"proxy/ruleset" {
		t.Fatalf("go list -deps did not list the builder last; got %v", deps)
	}
	for _, d := range deps {
		rel, ok := strings.CutPrefix(d, module)
		if !ok {
			continue
		}
		for _, f := range forbidden {
			if rel == f || strings.HasPrefix(rel, f+"/") {
				t.Errorf("proxy/ruleset depends on %s; the builder must stay pure: put what both sides need in a leaf (as proxy/fragment)", d)
			}
		}
	}
}
