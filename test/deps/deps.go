// Package deps lets a test pin which of the module's packages the package under test may link:
// `go list -deps` of the test's own directory, so a new import anywhere below it is caught.
package deps

import (
	"os/exec"
	"strings"
	"testing"
)

// Module is the import path prefix of this module's packages.
const Module = "github.com/nftproxy/nftproxy/"

// Forbid fails t for each dependency of the package in the working directory (pkg, relative to
// the module, e.g. "proxy/ruleset") that is one of forbidden or below one of them; advice says
// what to do instead.
func Forbid(t testing.TB, pkg, advice string, forbidden ...string) {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to list %s's dependencies: %v", pkg, err)
	}
	out, err := exec.Command(goBin, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	all := strings.Fields(string(out))
	if len(all) == 0 || all[len(all)-1] != Module+pkg {
		t.Fatalf("go list -deps did not list %s last; got %v", pkg, all)
	}
	for _, d := range all {
		rel, ok := strings.CutPrefix(d, Module)
		if !ok {
			continue
		}
		for _, f := range forbidden {
			if rel == f || strings.HasPrefix(rel, f+"/") {
				t.Errorf("%s depends on %s; %s", pkg, d, advice)
			}
		}
	}
}
