package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image holds and how it starts; the test and deploy/README.md rely on these.
const (
	// Entrypoint is the binary's path in the image: the root, the image's only program.
	Entrypoint = "/nftproxy"
	// User is the image's default user: nonroot. The DaemonSet overrides it with user 0 plus
	// CAP_NET_ADMIN (a capability a Pod adds reaches uid 0 only); the allocator and the
	// commands that do not touch the kernel run as this user.
	User = "65532:65532"
	// Package is what the image's binary is built from.
	Package = "github.com/nftproxy/nftproxy/cmd/nftproxy"
	// DefaultRepo is where the image is published; deploy/'s kustomizations name it.
	DefaultRepo = "ghcr.io/nftproxy/nftproxy"
	// VersionVar is the variable `nftproxy version` prints, set with -ldflags -X.
	VersionVar = "github.com/nftproxy/nftproxy/cmd/nftproxy/app.Version"
)

// Label keys (OCI annotations, also written as the image config's labels).
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelTitle    = "org.opencontainers.image.title"
	LabelSource   = "org.opencontainers.image.source"
	LabelCreated  = "org.opencontainers.image.created"
	// RefName names the image in the layout's index.json: the tag (OCI image-layout).
	RefName = "org.opencontainers.image.ref.name"
	// ContainerdName is the full reference `ctr image import` gives the image.
	ContainerdName = "io.containerd.image.name"
)

// passwd and group name root and the image's nonroot user, for tools that map ids to names;
// nftproxy itself never looks users up.
const (
	passwd = "root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// Platform is one os/architecture the image is built for.
type Platform struct{ OS, Arch string }

func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatforms reads "linux/amd64,linux/arm64".
func ParsePlatforms(s string) ([]Platform, error) {
	var out []Platform
	for _, f := range strings.Split(s, ",") {
		goos, arch, ok := strings.Cut(strings.TrimSpace(f), "/")
		if !ok || goos != "linux" || arch == "" || strings.Contains(arch, "/") {
			return nil, fmt.Errorf("platform %q: want linux/ARCH (nftproxy programs the Linux kernel), e.g. linux/amd64,linux/arm64", f)
		}
		out = append(out, Platform{OS: goos, Arch: arch})
	}
	return out, nil
}

// Config says what Build makes.
type Config struct {
	// Version is stamped into the binary (`nftproxy version`) and the labels.
	Version string
	// Revision is the source commit for the labels; empty leaves the label out.
	Revision string
	// Ref is the image's full reference (REGISTRY/REPO:TAG); its tag names the image in the
	// layout, nothing is pushed.
	Ref string
	// Platforms to build; one image each, under one index.
	Platforms []Platform
	// Out is the OCI image-layout directory, replaced if it holds a layout already.
	Out string
	// Tarball, when set, is a tar of the layout (an OCI archive: skopeo's oci-archive:,
	// `docker load`, `ctr image import`).
	Tarball string
	// Created is the images' creation time and every file's mtime; fixed (SOURCE_DATE_EPOCH)
	// so the same source gives the same digests.
	Created time.Time
	// Go is the go command (default "go"); Dir the directory it runs in (default: here).
	Go, Dir string
	// Log receives the build's progress; nil discards it.
	Log io.Writer
}

var versionRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)

func (c *Config) check() error {
	if !versionRE.MatchString(c.Version) {
		return fmt.Errorf("version %q: want letters, digits, '.', '_', '-' (it is stamped with -ldflags and may be a tag), e.g. $(git describe --always --dirty)", c.Version)
	}
	if _, err := name.NewTag(c.Ref, name.StrictValidation); err != nil {
		return fmt.Errorf("image reference %q: %w (want REGISTRY/REPO:TAG)", c.Ref, err)
	}
	if len(c.Platforms) == 0 {
		return errors.New("no platforms: give linux/amd64,linux/arm64 or a subset")
	}
	if c.Out == "" {
		return errors.New("no output directory for the OCI layout")
	}
	if c.Go == "" {
		c.Go = "go"
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// Build compiles the binary for every platform and writes the OCI layout (and the tarball):
// index.json holds one entry, the multi-platform index, named by the reference's tag.
func Build(ctx context.Context, c Config) error {
	if err := c.check(); err != nil {
		return err
	}
	tag, _ := name.NewTag(c.Ref, name.StrictValidation)
	labels := map[string]string{
		LabelVersion: c.Version,
		LabelTitle:   "nftproxy",
		LabelSource:  "https://github.com/nftproxy/nftproxy",
		LabelCreated: c.Created.UTC().Format(time.RFC3339),
	}
	if c.Revision != "" {
		labels[LabelRevision] = c.Revision
	}
	tmp, err := os.MkdirTemp("", "nftproxy-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range c.Platforms {
		bin := filepath.Join(tmp, "nftproxy-"+p.OS+"-"+p.Arch)
		if err := c.compile(ctx, p, bin); err != nil {
			return err
		}
		img, err := c.image(p, bin, labels)
		if err != nil {
			return fmt.Errorf("%s image: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Arch}},
		})
	}
	idx = mutate.Annotations(idx, labels).(v1.ImageIndex)

	if err := clearLayout(c.Out); err != nil {
		return err
	}
	lp, err := layout.Write(c.Out, empty.Index)
	if err != nil {
		return fmt.Errorf("write OCI layout %s: %w", c.Out, err)
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		RefName: tag.TagStr(), ContainerdName: tag.Name(),
	})); err != nil {
		return fmt.Errorf("write OCI layout %s: %w", c.Out, err)
	}
	d, _ := idx.Digest()
	fmt.Fprintf(c.Log, "image %s (%s) written to %s\n", tag.Name(), d, c.Out)
	if c.Tarball != "" {
		if err := tarDir(c.Out, c.Tarball, c.Created); err != nil {
			return fmt.Errorf("tarball %s: %w", c.Tarball, err)
		}
		fmt.Fprintf(c.Log, "OCI archive written to %s\n", c.Tarball)
	}
	return nil
}

// compile builds a static binary (CGO_ENABLED=0: netlink needs no libc) with the version
// stamped in; -trimpath keeps the build machine's paths out of it. Go's build cache (outside
// the repository) makes a rebuild of unchanged code a link only.
func (c *Config) compile(ctx context.Context, p Platform, out string) error {
	ldflags := "-s -w -X " + VersionVar + "=" + c.Version
	cmd := exec.CommandContext(ctx, c.Go, "build", "-trimpath", "-ldflags", ldflags, "-o", out, Package)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Arch)
	cmd.Stdout, cmd.Stderr = c.Log, c.Log
	fmt.Fprintf(c.Log, "building %s for %s\n", Package, p)
	var stderr bytes.Buffer
	if c.Log == io.Discard {
		cmd.Stderr = &stderr
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", p, err, stderr.String())
	}
	return nil
}

// image is FROM scratch plus one layer: the binary at Entrypoint, /etc/passwd and /etc/group.
// No CA bundle: in a pod the API server's CA is the ServiceAccount's ca.crt, and a kubeconfig
// carries its own; nftproxy talks to nothing else over TLS.
func (c *Config) image(p Platform, bin string, labels map[string]string) (v1.Image, error) {
	b, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		hdr  tar.Header
		data []byte
	}{
		{tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755}, nil},
		{tar.Header{Typeflag: tar.TypeReg, Name: "etc/group", Mode: 0o644}, []byte(group)},
		{tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644}, []byte(passwd)},
		{tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(Entrypoint, "/"), Mode: 0o755}, b},
	}
	for _, e := range entries {
		h := e.hdr
		h.Size, h.ModTime = int64(len(e.data)), c.Created
		if err := tw.WriteHeader(&h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: c.Created},
		CreatedBy: "nftproxy deploy/image: " + Entrypoint + " (static, " + p.String() + "), /etc/passwd, /etc/group",
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = p.OS, p.Arch
	cf.Created = v1.Time{Time: c.Created}
	cf.Config = v1.Config{
		Entrypoint: []string{Entrypoint},
		User:       User,
		WorkingDir: "/",
		Labels:     labels,
	}
	return mutate.ConfigFile(img, cf)
}

// clearLayout removes dir if it is an OCI layout (a previous build), so no blob of an older
// image stays; anything else is refused rather than deleted.
func clearLayout(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(ents) == 0 {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("%s exists and is not an OCI layout: give an empty or new directory", dir)
	}
	return os.RemoveAll(dir)
}

// tarDir writes dir's files into a tar at out (sorted, fixed times), atomically.
func tarDir(dir, out string, mtime time.Time) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(files)
	f, err := os.CreateTemp(filepath.Dir(out), ".nftproxy-image-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	tw := tar.NewWriter(f)
	for _, p := range files {
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		if err != nil {
			f.Close()
			return err
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b)), ModTime: mtime}
		if err := tw.WriteHeader(h); err != nil {
			f.Close()
			return err
		}
		if _, err := tw.Write(b); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), out)
}
