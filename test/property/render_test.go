package property

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nftproxy/nftproxy/cmd/nftproxy/app"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/netns"
)

// rejectedLine is how `nftproxy render` lists a rejected Service.
var rejectedLine = regexp.MustCompile(`(?m)^# rejected service (\S+) \((\w+)\): `)

// TestGeneratedServicesRender runs the real `nftproxy render` (in process) over each batch
// written as manifest files, one file per Service: every file loads, the command succeeds, each
// Service is listed as rejected or has its chains in the text as its shape requires, and, when
// the test may create namespaces, the text loads with `nft -f` in a fresh one. Manifest mode
// assigns node ports itself, so a deliberately clashing node port may end as a rejection or as
// a port left unassigned; both are accepted here.
func TestGeneratedServicesRender(t *testing.T) {
	p := currentProfile()
	var ns *netns.NS
	if os.Geteuid() == 0 && os.Getenv("NFTPROXY_UNIT_ONLY") == "" {
		ns = netns.New(t, "nftp-prop-render")
	}
	for _, seed := range seeds(t, p.kernelSeeds) {
		b := Generate(options(seed, p.kernelServices, p))
		dir := t.TempDir()
		writeManifests(t, dir, b)
		var out, errOut bytes.Buffer
		code := app.Main([]string{"nftproxy", "render", "--manifests", dir, "--node-name", nodeName,
			"--cluster-cidr", clusterCIDRs[0].String() + "," + clusterCIDRs[1].String(),
			"--service-cidr", serviceCIDRs[0].String() + "," + serviceCIDRs[1].String()}, &out, &errOut)
		if code != 0 {
			t.Errorf("seed %d: nftproxy render exited %d: %s", seed, code, clip(errOut.String(), 20))
			continue
		}
		text := out.String()
		failures := checkRendered(b, text)
		if ns != nil {
			if o, err := ns.RunStdin("flush ruleset\n"+text, "nft", "-f", "-"); err != nil {
				failures = append(failures, Failure{What: fmt.Sprintf("nft -f of the render output: %v %s", clip(err.Error(), 20), o)})
			}
		}
		report(t, "TestGeneratedServicesRender", b, failures, func(single *Batch) []Failure { return RunPure(single, nodeIPs).Failures })
	}
}

// writeManifests writes the Node and one file per Service (with its slices) into dir.
func writeManifests(t *testing.T, dir string, b *Batch) {
	t.Helper()
	b.Node.APIVersion, b.Node.Kind = "v1", "Node"
	node, err := yaml.Marshal(b.Node)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"node.yaml": string(node)}
	for i, gs := range b.Services {
		files[fmt.Sprintf("svc-%04d.yaml", i)] = manifests(gs)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkRendered reads render's output: no file skipped, and each Service listed as rejected or
// present (its service chains) as its shape requires.
func checkRendered(b *Batch, text string) []Failure {
	var out []Failure
	if strings.Contains(text, "# skipped file:") {
		for _, l := range strings.Split(text, "\n") {
			if strings.HasPrefix(l, "# skipped file:") {
				out = append(out, Failure{What: "render skipped a file of API-valid objects: " + l})
			}
		}
	}
	rejected := map[string]string{}
	for _, m := range rejectedLine.FindAllStringSubmatch(text, -1) {
		rejected[m[1]] = m[2]
	}
	for _, gs := range b.Services {
		key := gs.Key()
		reason, isRejected := rejected[key.String()]
		present := false
		for _, pn := range portNames(gs) {
			if strings.Contains(text, ruleset.ServiceChain(pn)) || strings.Contains(text, "comment \""+commentPrefix(pn.String())) {
				present = true
			}
		}
		fail := func(got string) {
			out = append(out, Failure{key, fmt.Sprintf("render: want %v, got %s", gs.Expect, got)})
		}
		exp := gs.Expect
		if gs.Shapes[ShapeNodePortClash] {
			exp = Expect{Outcome: Either}
		}
		if gs.Shapes[ShapeNodePortBlockReserved] && strings.Contains(text, "# node port not assigned: Service "+key.String()+" ") {
			// Manifest mode is its own node-port control plane: it refuses a block outside the
			// block range before the model sees it (as the API server refuses a taken nodePort),
			// reports it, and serves the rest of the Service. Nothing of the block is programmed
			// (the pure and kernel tests check the model's own rejection of such a block).
			exp = Expect{Outcome: Either}
		}
		if gs.Shapes[ShapeKernelAddress] {
			// render reads no kernel's addresses (only the Node manifest's), and its
			// --service-cidr refuses such a cluster IP first (ClusterIPOutsideServiceCIDR).
			exp = Expect{Outcome: Rejected, Reason: model.ReasonClusterIPOutsideServiceCIDR, Why: exp.Why}
		}
		switch {
		case isRejected && !contains(model.AllReasons(), reason):
			fail("rejected with undocumented reason " + reason)
		case exp.Outcome == Programmed && isRejected:
			fail("rejected (" + reason + ")")
		case exp.Outcome == Programmed && !present:
			fail("nothing in the text")
		case exp.Outcome == Rejected && !isRejected:
			fail("not listed as rejected")
		case exp.Outcome == Rejected && exp.Reason != "" && reason != exp.Reason:
			fail("rejected (" + reason + ")")
		case exp.Outcome == Ignored && (isRejected || present):
			fail("listed or programmed")
		}
	}
	return out
}

// commentPrefix is what a comment naming s starts with in the text: comments are cut to the
// kernel's 127 bytes (ending in "..."), so a long name is matched by its first 100 bytes.
func commentPrefix(s string) string {
	if len(s) > 100 {
		return s[:100]
	}
	return s + "\""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
