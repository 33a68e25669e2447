package node

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
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

// The images the tier imports into containerd, by the names pods use. No registry serves
// them: containerd has them before any pod asks, and the kubelet never pulls a tag it has
// (IfNotPresent).
const (
	PauseImage = "localhost/nftproxy-node/pause:1"
	EchoImage  = "localhost/nftproxy-node/echo" // tagged :1 and :2 for the backend rollout
	// NftproxyRepo is the repository deploy/ names; the tier builds it under its own tags.
	NftproxyRepo = "ghcr.io/nftproxy/nftproxy"
)

// containerdName annotates an OCI layout's index entry with the reference `ctr images import`
// gives the image.
const containerdName = "io.containerd.image.name"

// BuildNftproxyImage builds nftproxy's image exactly as `make image` does (deploy/image), for
// this machine's architecture only, tagged tag, and returns the OCI archive's path. repo is the
// checkout's root.
func BuildNftproxyImage(ctx context.Context, repo, dir, tag string) (string, error) {
	out := filepath.Join(dir, "nftproxy-"+tag)
	archive := out + ".tar"
	cmd := exec.CommandContext(ctx, "go", "run", "./deploy/image",
		"-platforms", "linux/"+runtime.GOARCH, "-version", tag, "-ref", NftproxyRepo+":"+tag,
		"-out", out, "-tarball", archive, "-created", "0")
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make image (go run ./deploy/image) for tag %s: %w\n%s", tag, err, b)
	}
	return archive, nil
}

// BuildBinaryImage compiles the main package pkg (static) and writes an OCI archive holding one
// image FROM scratch: the binary as /entrypoint, started with args, named ref. It returns the
// archive's path.
func BuildBinaryImage(ctx context.Context, repo, dir, pkg, ref string, args []string) (string, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	safe := strings.NewReplacer("/", "_", ":", "_").Replace(ref)
	bin := filepath.Join(dir, safe+".bin")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	img, err := filesImage([]imageFile{{"entrypoint", data}}, "/entrypoint", nil, args)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", ref, err)
	}
	return writeArchive(dir, tag, img)
}

// KubeProxyImage names the kube-proxy image the migration test deploys (built from the cached
// binary, never pulled).
const KubeProxyImage = "localhost/nftproxy-node/kube-proxy"

// BuildKubeProxyImage writes an OCI archive of a kube-proxy image FROM scratch, tagged
// version: the static kube-proxy binary at /usr/local/bin/kube-proxy (its process name) and, for its nftables mode (which execs
// `nft`), this machine's nft with the shared libraries ldd lists for it, at their paths.
// kube-proxy since v1.31 cleans conntrack over netlink, so no conntrack binary.
func BuildKubeProxyImage(ctx context.Context, dir, kubeProxy, version string) (string, error) {
	tag, err := name.NewTag(KubeProxyImage+":"+version, name.StrictValidation)
	if err != nil {
		return "", err
	}
	nft, err := exec.LookPath("nft")
	if err != nil {
		return "", fmt.Errorf("kube-proxy image: nft (apt-get install nftables): %w", err)
	}
	out, err := exec.CommandContext(ctx, "ldd", nft).Output()
	if err != nil {
		return "", fmt.Errorf("ldd %s: %w", nft, err)
	}
	// Each library at the path the loader looks for it (ldd's "=> /path" or the loader's own
	// absolute name), its content read through symlinks.
	paths := map[string]string{"usr/local/bin/kube-proxy": kubeProxy, "usr/sbin/nft": nft}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		for i, w := range f {
			if strings.HasPrefix(w, "/") && (i == 0 || f[i-1] == "=>") {
				paths[strings.TrimPrefix(w, "/")] = w
			}
		}
	}
	var files []imageFile
	for in, host := range paths {
		b, err := os.ReadFile(host)
		if err != nil {
			return "", fmt.Errorf("kube-proxy image: %w", err)
		}
		files = append(files, imageFile{in, b})
	}
	sort.Slice(files, func(i, j int) bool { return files[i].name < files[j].name })
	img, err := filesImage(files, "/usr/local/bin/kube-proxy", []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}, nil)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", tag, err)
	}
	return writeArchive(dir, tag, img)
}

// writeArchive writes img for this machine's architecture as an OCI layout named tag, and
// returns the path of its archive.
func writeArchive(dir string, tag name.Tag, img v1.Image) (string, error) {
	ref := tag.String()
	safe := strings.NewReplacer("/", "_", ":", "_").Replace(ref)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), mutate.IndexAddendum{
		Add:        img,
		Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}},
	})
	out := filepath.Join(dir, safe)
	lp, err := layout.Write(out, empty.Index)
	if err != nil {
		return "", err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.TagStr(), containerdName: tag.Name(),
	})); err != nil {
		return "", err
	}
	archive := out + ".tar"
	if err := tarTree(out, archive); err != nil {
		return "", fmt.Errorf("archive %s: %w", archive, err)
	}
	return archive, nil
}

// imageFile is one executable file of an image, by its path inside it.
type imageFile struct {
	name string
	data []byte
}

// filesImage is one uncompressed layer holding files (mode 0755) and their folders, started
// as entrypoint with args and env.
func filesImage(files []imageFile, entrypoint string, env, args []string) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		for d := path.Dir(f.name); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted) // parents first
	for _, d := range sorted {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o755, Size: int64(len(f.data)), ModTime: time.Unix(0, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config = v1.Config{Entrypoint: []string{entrypoint}, Cmd: args, Env: env, WorkingDir: "/"}
	return mutate.ConfigFile(img, cf)
}

// tarTree writes dir's regular files into a tar at out: an OCI archive of a layout.
func tarTree(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
