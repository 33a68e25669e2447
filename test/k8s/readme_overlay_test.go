package k8s

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// TestREADMEOverlaysSetTheImage builds every overlay deploy/README.md tells operators to write
// (a `# my-cluster/kustomization.yaml` block over ../deploy) and checks that its images: entry
// reaches the pods: every container of the build runs the image the overlay names. An overlay
// that names the image as the base's manifests do ("nftproxy") matches nothing once the base
// has renamed it, and the pods keep pulling the base's image: the node tier's kubelet found it
// so (ImagePullBackOff on ghcr.io/nftproxy/nftproxy:v0.1.0).
func TestREADMEOverlaysSetTheImage(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(deployDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(# my-cluster/kustomization.yaml\n.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("deploy/README.md has no `# my-cluster/kustomization.yaml` example")
	}
	base, err := filepath.Abs(deployDir)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range blocks {
		var k struct {
			Images []struct {
				NewName string `json:"newName"`
				NewTag  string `json:"newTag"`
			} `json:"images"`
		}
		if err := yaml.Unmarshal([]byte(b[1]), &k); err != nil {
			t.Fatalf("example %d: %v", i+1, err)
		}
		if len(k.Images) != 1 {
			continue
		}
		want := k.Images[0].NewName + ":" + k.Images[0].NewTag
		dir := t.TempDir()
		rel, err := filepath.Rel(dir, base)
		if err != nil {
			t.Fatal(err)
		}
		overlay := strings.ReplaceAll(b[1], "../deploy", rel)
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
		if err != nil {
			t.Fatalf("example %d: kustomize build: %v", i+1, err)
		}
		n := 0
		for _, r := range m.Resources() {
			if r.GetKind() != "DaemonSet" {
				continue
			}
			obj, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			spec := obj["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)
			for _, key := range []string{"initContainers", "containers"} {
				cs, _ := spec[key].([]any)
				for _, c := range cs {
					c := c.(map[string]any)
					n++
					if c["image"] != want {
						t.Errorf("README example %d: %s %s runs %v, want the overlay's %s", i+1, key, c["name"], c["image"], want)
					}
				}
			}
		}
		if n == 0 {
			t.Errorf("README example %d: no DaemonSet container in the build", i+1)
		}
	}
}
