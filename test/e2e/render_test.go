package e2e

import (
	"os/exec"
	"testing"

	"github.com/nftproxy/nftproxy/test/golden"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

// TestRenderMatchesDaemon: what the daemon programs over netlink lists exactly like what nft
// itself programs from `nftproxy render` of the same manifests, in a fresh namespace. This is
// the proof that the daemon's bytecode is what nft would write, for every Service shape of the
// static scenario (with its invalid Service and malformed file).
func TestRenderMatchesDaemon(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{}}, staticServices()...)
	e.writeFile("broken.yaml", malformedManifest)
	e.start(staticServices()[:5]...)
	daemon := e.ruleset()

	rendered, err := exec.Command(daemonBinary, append([]string{"render"}, tier.ManifestFlags(e.dir)...)...).Output()
	if err != nil {
		t.Fatalf("nftproxy render: %v", err)
	}
	fresh := netns.New(t, "nftp-render")
	if out, err := fresh.RunStdin(string(rendered), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft -f of the render output: %v\n%s\nrender output:\n%s", err, out, rendered)
	}
	loaded, err := fresh.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	if d := golden.Diff(canonicalListing(daemon), canonicalListing(loaded)); d != "" {
		t.Errorf("nft list ruleset differs (elements sorted; - daemon, + nft -f render):\n%s", d)
	} else if d := golden.Diff(daemon, loaded); d != "" {
		// Same sets, elements listed in another order: the kernel lists interval elements in
		// the order they were added. Logged, not failed; see canonicalListing.
		t.Logf("listings equal once elements are sorted; as listed (- daemon, + nft -f render):\n%s", d)
	}
}
