package main

import (
	"archive/tar"
	"context"
	"debug/elf"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// elfMachine is the ELF machine each architecture's binary must carry.
var elfMachine = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// TestImage builds the image as `make image` does, into a temporary directory, and inspects
// what a node would run: one tagged entry in index.json, an index for linux/amd64 and
// linux/arm64, each image starting /nftproxy as the nonroot user with the version in its
// labels, holding a static binary of its own architecture and nothing but /etc/passwd and
// /etc/group beside it; the amd64 binary, run, prints the stamped version. The OCI archive
// holds the same layout, and the index pushed to a registry (in memory, on loopback) is pulled
// back per platform. A cold build compiles the tree twice (minutes on 2 cores); Go's build
// cache, outside the repository, makes later runs take seconds (the amd64 one shares
// `make build`'s). -short or NFTPROXY_SKIP_IMAGE=1 skips it.
func TestImage(t *testing.T) {
	if testing.Short() || os.Getenv("NFTPROXY_SKIP_IMAGE") == "1" {
		t.Skip("-short or NFTPROXY_SKIP_IMAGE=1: not building the image")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the image with")
	}
	const version = "v0.0.0-imagetest.1"
	dir := t.TempDir()
	out, archive := filepath.Join(dir, "layout"), filepath.Join(dir, "image.tar")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	err := Build(ctx, Config{
		Version: version, Revision: "0123abc", Ref: "registry.example/nftproxy:" + version,
		Platforms: []Platform{{"linux", "amd64"}, {"linux", "arm64"}},
		Out:       out, Tarball: archive, Created: time.Unix(1700000000, 0).UTC(),
		Dir: filepath.Join("..", ".."), Log: testWriter{t},
	})
	if err != nil {
		t.Fatal(err)
	}

	top, err := layout.ImageIndexFromPath(out)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].MediaType != types.OCIImageIndex ||
		tm.Manifests[0].Annotations[RefName] != version {
		t.Fatalf("index.json: got %+v, want one OCI index named %q (crane push DIR pushes it)", tm.Manifests, version)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var archs []string
	for _, d := range im.Manifests {
		if d.Platform == nil || d.Platform.OS != "linux" {
			t.Fatalf("index entry %s: platform %+v, want linux/*", d.Digest, d.Platform)
		}
		archs = append(archs, d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, img, d.Platform.Architecture, version)
	}
	slices.Sort(archs)
	if !slices.Equal(archs, []string{"amd64", "arm64"}) {
		t.Errorf("index architectures: got %v, want amd64 and arm64", archs)
	}
	if im.Annotations[LabelVersion] != version {
		t.Errorf("index annotations: got %v, want %s=%s", im.Annotations, LabelVersion, version)
	}
	checkArchive(t, archive, tm.Manifests[0].Digest)
	checkPush(t, idx, version)
}

// checkPush does what `crane push bin/image REF` does (remote.WriteIndex) against an
// in-memory registry on loopback, then pulls each platform as a node would.
func checkPush(t *testing.T, idx v1.ImageIndex, tag string) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	ref, err := name.ParseReference(strings.TrimPrefix(srv.URL, "http://")+"/nftproxy:"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatalf("push: %v", err)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: arch}))
		if err != nil {
			t.Fatalf("pull %s for linux/%s: %v", ref, arch, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != arch || cf.Config.Labels[LabelVersion] != tag {
			t.Errorf("pulled linux/%s: got %s with labels %v", arch, cf.Architecture, cf.Config.Labels)
		}
	}
}

// checkImage inspects one platform's image: config, files, the binary.
func checkImage(t *testing.T, img v1.Image, arch, version string) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/nftproxy"}) || len(c.Cmd) != 0 {
		t.Errorf("%s: entrypoint %q cmd %q, want [/nftproxy] and no cmd", arch, c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" {
		t.Errorf("%s: user %q, want 65532:65532 (numeric, so runAsNonRoot can check it)", arch, c.User)
	}
	if c.Labels[LabelVersion] != version || c.Labels[LabelRevision] != "0123abc" {
		t.Errorf("%s: labels %v, want version %s and revision 0123abc", arch, c.Labels, version)
	}
	if cf.OS != "linux" || cf.Architecture != arch {
		t.Errorf("%s: config says %s/%s", arch, cf.OS, cf.Architecture)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = b
		if h.Name == "nftproxy" && (h.Mode != 0o755 || h.Uid != 0) {
			t.Errorf("%s: /nftproxy mode %o uid %d, want 755 and root's", arch, h.Mode, h.Uid)
		}
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"etc", "etc/group", "etc/passwd", "nftproxy"}; !slices.Equal(names, want) {
		t.Errorf("%s: files %v, want %v", arch, names, want)
	}
	if !strings.Contains(string(files["etc/passwd"]), ":65532:65532:") {
		t.Errorf("%s: /etc/passwd has no user 65532:\n%s", arch, files["etc/passwd"])
	}
	bin := filepath.Join(t.TempDir(), "nftproxy")
	if err := os.WriteFile(bin, files["nftproxy"], 0o755); err != nil {
		t.Fatal(err)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: /nftproxy is not an ELF binary: %v", arch, err)
	}
	defer ef.Close()
	if ef.Machine != elfMachine[arch] {
		t.Errorf("%s: /nftproxy is built for %v", arch, ef.Machine)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: /nftproxy asks for a dynamic loader; the image has no libc (CGO_ENABLED=0)", arch)
		}
	}
	if arch != runtime.GOARCH || runtime.GOOS != "linux" {
		return
	}
	got, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatalf("%s: /nftproxy version: %v", arch, err)
	}
	if want := "nftproxy " + version + "\n"; string(got) != want {
		t.Errorf("%s: /nftproxy version printed %q, want %q", arch, got, want)
	}
}

// checkArchive unpacks the OCI archive and finds the same index in it.
func checkArchive(t *testing.T, archive string, want v1.Hash) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("archive entry %q leaves the directory", h.Name)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("archive: %v", err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Digest != want {
		t.Errorf("archive index.json: got %+v, want the layout's index %s", m.Manifests, want)
	}
}

// TestConfigRefused: a version or reference that would break -ldflags, the tag or the
// platforms is refused before anything is built.
func TestConfigRefused(t *testing.T) {
	ok := Config{Version: "v1", Ref: "r.example/nftproxy:v1", Platforms: []Platform{{"linux", "amd64"}}, Out: t.TempDir()}
	cases := map[string]func(*Config){
		"version with a space":  func(c *Config) { c.Version = "v1 -X main.x=y" },
		"version with a quote":  func(c *Config) { c.Version = `v1"` },
		"reference without tag": func(c *Config) { c.Ref = "r.example/nftproxy" },
		"no platforms":          func(c *Config) { c.Platforms = nil },
	}
	for name, mod := range cases {
		t.Run(name, func(t *testing.T) {
			c := ok
			mod(&c)
			if err := Build(context.Background(), c); err == nil {
				t.Errorf("built %+v, want a refusal", c)
			}
		})
	}
	if _, err := ParsePlatforms("darwin/arm64"); err == nil {
		t.Error("darwin/arm64 accepted; nftproxy only runs on Linux")
	}
	notLayout := t.TempDir()
	if err := os.WriteFile(filepath.Join(notLayout, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := clearLayout(notLayout); err == nil {
		t.Error("clearLayout deleted a directory that is not an OCI layout")
	}
}

// testWriter sends the build's progress to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
