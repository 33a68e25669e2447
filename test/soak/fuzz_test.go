package soak

import (
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/fixture"
)

// seedDirs hold real manifests the fuzzer starts from (relative to this package).
var seedDirs = []string{"../../deploy/examples", "../../proxy/model/testdata/invalid"}

// maxSeed leaves the 10k-port Service out of the seeds: mutating a file that large makes each
// execution take a second, and the fuzzer would do little else.
const maxSeed = 16 << 10

// FuzzManifestLoad feeds arbitrary bytes, as one manifest file, through everything the daemon
// does with a file before the kernel: load, feed the model, build and render both families'
// rulesets. Nothing may panic; whatever is accepted must render. Without -fuzz it runs the
// seeds: every example, every invalid-corpus file and every hostile input of TestHostileInput.
func FuzzManifestLoad(f *testing.F) {
	for _, dir := range seedDirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			f.Fatal(err)
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	for _, h := range hostileInputs() {
		if len(h.content) <= maxSeed {
			f.Add([]byte(h.content))
		}
	}
	var builders []*ruleset.Builder
	for _, fam := range []nft.Family{nft.IPv4, nft.IPv6} {
		b, err := ruleset.NewBuilder(ruleset.Config{Family: fam, MasqueradeMark: 0x4000, DropMark: 0x8000, NodeName: fixture.NodeName,
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.128.0/24"), netip.MustParsePrefix("fd00:128::/64")},
			ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/18"), netip.MustParsePrefix("fd00:19::/112")}})
		if err != nil {
			f.Fatal(err)
		}
		builders = append(builders, b)
	}
	f.Fuzz(func(t *testing.T, content []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "input.yaml"), content, 0o644); err != nil {
			t.Fatal(err)
		}
		objs, ferrs := manifest.Load(dir)
		for _, fe := range ferrs {
			if fe.Error() == "" {
				t.Fatalf("a file error without a message: %#v", fe)
			}
		}
		tr := model.NewTracker(model.TrackerConfig{NodeName: fixture.NodeName, Logger: logr.Discard()})
		manifest.NewFeeder(tr).Feed(objs, ferrs)
		snap := tr.Snapshot()
		for _, s := range snap.Sorted() {
			if s.Rejected != nil && s.Rejected.Reason == "" {
				t.Fatalf("service %s rejected without a reason: %+v", s.Key, s.Rejected)
			}
		}
		for _, b := range builders {
			_ = nft.Render(nft.Canonical(b.Ruleset(snap.Node, snap.Sorted())))
		}
	})
}

// fuzzTargets are the project's fuzz targets the soak run fuzzes for real.
var fuzzTargets = []struct{ pkg, name string }{
	{"./proxy/annotation", "FuzzPortRanges"},
	{"./test/soak", "FuzzManifestLoad"},
}

// execsLine matches the fuzzer's progress lines: "fuzz: elapsed: 3s, execs: 1234 (411/sec), ...".
var execsLine = regexp.MustCompile(`execs: (\d+)`)

// TestFuzzBounded runs `go test -fuzz` on every fuzz target for the profile's time (long
// profile only; the short one runs the seeds as regular tests). A crasher fails the test and is
// saved under the package's testdata/fuzz, as go test does.
func TestFuzzBounded(t *testing.T) {
	const scenario = "5 hostile input: fuzzing"
	if run.fuzzFor == 0 {
		t.Skip("short profile: fuzz seeds run as regular tests; NFTPROXY_SOAK=1 fuzzes each target")
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	for _, ft := range fuzzTargets {
		cmd := exec.Command("go", "test", "-run", "^$", "-fuzz", "^"+ft.name+"$", "-fuzztime", run.fuzzFor.String(), ft.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "NFTPROXY_UNIT_ONLY=1") // no daemon build in the fuzz workers
		b, err := cmd.CombinedOutput()
		execs := "?"
		if m := execsLine.FindAllStringSubmatch(string(b), -1); len(m) > 0 {
			execs = m[len(m)-1][1]
		}
		verdict := "no failure"
		if err != nil {
			verdict = "FAILED"
			t.Errorf("go test -fuzz %s %s: %v\n%s", ft.name, ft.pkg, err, tail(string(b), 40))
		}
		report.Add(t, scenario, ft.name, "%s execs in %v: %s", execs, run.fuzzFor, verdict)
	}
}
