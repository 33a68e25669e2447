package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"
)

// TestDeployNamesTheImage: both kustomize bases map the manifests' image "nftproxy" to the
// repository `make image` names, by a tag (never latest, so pods restart from the image the
// node has), the same in both; their containers keep the image's entrypoint (no command:).
func TestDeployNamesTheImage(t *testing.T) {
	tags := map[string]string{}
	for _, base := range []string{"..", filepath.Join("..", "allocator")} {
		var k struct {
			Resources []string `json:"resources"`
			Images    []struct {
				Name    string `json:"name"`
				NewName string `json:"newName"`
				NewTag  string `json:"newTag"`
				Digest  string `json:"digest"`
			} `json:"images"`
		}
		read(t, filepath.Join(base, "kustomization.yaml"), &k)
		if len(k.Images) != 1 || k.Images[0].Name != "nftproxy" {
			t.Fatalf("%s/kustomization.yaml: images %+v, want one entry for nftproxy", base, k.Images)
		}
		im := k.Images[0]
		if im.NewName != DefaultRepo || im.NewTag == "" || im.NewTag == "latest" {
			t.Errorf("%s/kustomization.yaml: %s:%s, want %s:TAG with a fixed tag", base, im.NewName, im.NewTag, DefaultRepo)
		}
		if _, err := name.NewTag(im.NewName+":"+im.NewTag, name.StrictValidation); err != nil {
			t.Errorf("%s/kustomization.yaml: %v", base, err)
		}
		tags[base] = im.NewTag
		for _, r := range k.Resources {
			var obj struct {
				Kind string `json:"kind"`
				Spec struct {
					Template struct {
						Spec struct {
							Containers []struct {
								Name    string   `json:"name"`
								Image   string   `json:"image"`
								Command []string `json:"command"`
							} `json:"containers"`
						} `json:"spec"`
					} `json:"template"`
				} `json:"spec"`
			}
			read(t, filepath.Join(base, r), &obj)
			for _, c := range obj.Spec.Template.Spec.Containers {
				if c.Image != "nftproxy" || len(c.Command) != 0 {
					t.Errorf("%s/%s container %s: image %q command %q, want image nftproxy (the images: entry) and the image's entrypoint %s",
						base, r, c.Name, c.Image, c.Command, Entrypoint)
				}
			}
		}
	}
	if tags[".."] != tags[filepath.Join("..", "allocator")] {
		t.Errorf("the DaemonSet and the allocator name different tags: %v", tags)
	}
	mk, err := os.ReadFile(filepath.Join("..", "..", "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "IMAGE   ?= "+DefaultRepo+":$(VERSION)") {
		t.Errorf("Makefile: no `IMAGE ?= %s:$(VERSION)`; make image must name the repository deploy/ pulls", DefaultRepo)
	}
}

func read(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
