package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/netns"
)

// run --once with a manifest file that cannot be used exits non-zero naming the file and its
// error, and changes nothing in the kernel: applying the other files would delete the broken
// file's Services (it used to, exiting 0).
func TestOnceBadFileChangesNothing(t *testing.T) {
	ns := netns.New(t, "nftp-oncebad")
	dir, state := t.TempDir(), t.TempDir()
	web := strings.Replace(strings.Replace(nodePortManifests, "name: np", "name: web", -1), "198.19.0.70", "198.19.0.71", 1)
	web = strings.Replace(web, "np-1", "web-1", 1)
	if err := os.WriteFile(filepath.Join(dir, "np.yaml"), []byte(nodePortManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	// web.yaml: the same shape without the Node.
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(web[strings.Index(web, "---\n")+4:]), 0o644); err != nil {
		t.Fatal(err)
	}
	once := func() (int, string) {
		var code int
		var errOut string
		if err := ns.Do(func() error {
			code, _, errOut = run("run", "--once", "--manifests", dir, "--node-name", "node-a", "--ip-families", "ipv4", "--state-dir", state)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return code, errOut
	}
	if code, errOut := once(); code != 0 {
		t.Fatalf("run --once: exit %d: %s", code, errOut)
	}
	before, err := ns.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(before, "default/web") || !strings.Contains(before, "default/np") {
		t.Fatalf("run --once did not program both Services:\n%s", before)
	}
	for _, c := range []struct{ name, content string }{
		{"typo", "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec: {clusterIP: 198.19.0.71, ports: [{name: http, port: 80, targetport: 8080}]}\n"},
		{"half written", web[strings.Index(web, "---\n")+4:][:60]},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			code, errOut := once()
			if code == 0 || !strings.Contains(errOut, "web.yaml") || !strings.Contains(errOut, "the kernel is unchanged") {
				t.Errorf("run --once with web.yaml broken: exit %d, stderr:\n%s\nwant a failure naming web.yaml", code, errOut)
			}
			after, err := ns.Run("nft", "list", "ruleset")
			if err != nil {
				t.Fatal(err)
			}
			if after != before {
				t.Errorf("run --once with web.yaml broken changed the kernel:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}
