package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
)

// The releases the helper modules pin. TestHelperModulesPinVersions keeps them equal to what
// tools/kube/go.mod, tools/kube-proxy-latest/go.mod and tools/etcd/go.mod require.
const (
	KubeVersion = "v1.34.4"
	// KubeProxyLatestVersion is the second kube-proxy built, the newest release the project
	// compares against (bench/'s peers, the migration tests), beside KubeVersion's.
	KubeProxyLatestVersion = "v1.37.2"
	EtcdVersion            = "v3.5.21"
)

// Environment variables that steer where binaries come from.
const (
	// EnvCache overrides the cache root (default: the user cache directory + "/nftproxy/tools").
	EnvCache = "NFTPROXY_TOOLS_CACHE"
	// EnvEtcd names an etcd binary to use instead of building one, e.g. Debian's etcd-server.
	EnvEtcd = "NFTPROXY_ETCD"
)

// Paths are the built binaries, ready to run.
type Paths struct {
	KubeAPIServer string
	KubeProxy     string // at KubeVersion
	Etcd          string
	// KubeProxies are every kube-proxy built, by release: KubeVersion's (KubeProxy) and
	// KubeProxyLatestVersion's.
	KubeProxies map[string]string
}

// KubeProxyAt is the kube-proxy binary of release v ("v1.37.2"), or an error naming the
// releases there are.
func (p Paths) KubeProxyAt(v string) (string, error) {
	if b, ok := p.KubeProxies[v]; ok {
		return b, nil
	}
	var have []string
	for r := range p.KubeProxies {
		have = append(have, r)
	}
	sort.Strings(have)
	return "", fmt.Errorf("no kube-proxy %s is built (there are %s); add a helper module under test/cluster/tools for it", v, strings.Join(have, ", "))
}

// NodePaths are the binaries of a node and the rest of the control plane, which only the node
// tier (test/node) runs: built on their own so the other tiers never wait for them.
type NodePaths struct {
	Kubelet               string
	KubeControllerManager string
	KubeScheduler         string
}

// tool is one build of a helper module: what it builds and the cache folder it goes to.
type tool struct {
	name     string   // cache folder and lock prefix
	module   string   // folder under tools/
	version  string   // release it pins, for the cache folder's name
	binaries []binary // what is built into the folder
	ldflags  string   // appended to -s -w
}

// binary is one main package and the file name it gets in the cache folder.
type binary struct {
	pkg, name string
}

// kubeTool builds the Kubernetes binaries.
func kubeTool() tool {
	return tool{
		name:    "kube",
		module:  "kube",
		version: KubeVersion,
		binaries: []binary{
			{"k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"},
			{"k8s.io/kubernetes/cmd/kube-proxy", "kube-proxy"},
		},
		ldflags: kubeVersionLDFlags(KubeVersion),
	}
}

// kubeNodeTool builds, from the same helper module (so the same release and dependency
// versions), what only a real node needs: the kubelet and the controllers and scheduler that
// turn a DaemonSet or a Deployment into pods on it.
func kubeNodeTool() tool {
	return tool{
		name:    "kube-node",
		module:  "kube",
		version: KubeVersion,
		binaries: []binary{
			{"k8s.io/kubernetes/cmd/kubelet", "kubelet"},
			{"k8s.io/kubernetes/cmd/kube-controller-manager", "kube-controller-manager"},
			{"k8s.io/kubernetes/cmd/kube-scheduler", "kube-scheduler"},
		},
		ldflags: kubeVersionLDFlags(KubeVersion),
	}
}

// kubeProxyLatestTool builds kube-proxy alone at KubeProxyLatestVersion, from its own helper
// module (the release's staging modules differ from KubeVersion's).
func kubeProxyLatestTool() tool {
	return tool{
		name:     "kube-proxy",
		module:   "kube-proxy-latest",
		version:  KubeProxyLatestVersion,
		binaries: []binary{{"k8s.io/kubernetes/cmd/kube-proxy", "kube-proxy"}},
		ldflags:  kubeVersionLDFlags(KubeProxyLatestVersion),
	}
}

// etcdTool builds etcd.
func etcdTool() tool {
	return tool{
		name:     "etcd",
		module:   "etcd",
		version:  EtcdVersion,
		binaries: []binary{{"go.etcd.io/etcd/server/v3", "etcd"}},
	}
}

// kubeVersionLDFlags stamps the release into the binaries so /version and the logs report it
// (without it they say v0.0.0-master).
func kubeVersionLDFlags(v string) string {
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	const pkg = "k8s.io/component-base/version"
	return fmt.Sprintf("-X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=%[3]s -X %[1]s.gitMinor=%[4]s -X %[1]s.gitTreeState=clean",
		pkg, v, parts[0], parts[1])
}

// Binaries returns kube-apiserver, both kube-proxy releases and etcd, building them on first use (minutes; see
// README.md) and reusing the cached copies afterwards (milliseconds). A file lock makes parallel
// callers, such as test packages run by one `go test ./...`, wait for one build.
func Binaries(ctx context.Context) (Paths, error) { return Prepare(ctx, io.Discard) }

// Prepare is Binaries with progress lines (what is built, where, how long it has run) written
// to progress.
func Prepare(ctx context.Context, progress io.Writer) (Paths, error) {
	root, err := CacheRoot()
	if err != nil {
		return Paths{}, err
	}
	tools, err := toolsDir()
	if err != nil {
		return Paths{}, err
	}
	kube, err := ensure(ctx, progress, root, tools, kubeTool())
	if err != nil {
		return Paths{}, err
	}
	latest, err := ensure(ctx, progress, root, tools, kubeProxyLatestTool())
	if err != nil {
		return Paths{}, err
	}
	p := Paths{
		KubeAPIServer: filepath.Join(kube, "kube-apiserver"),
		KubeProxy:     filepath.Join(kube, "kube-proxy"),
		KubeProxies: map[string]string{
			KubeVersion:            filepath.Join(kube, "kube-proxy"),
			KubeProxyLatestVersion: filepath.Join(latest, "kube-proxy"),
		},
	}
	if e := os.Getenv(EnvEtcd); e != "" {
		p.Etcd = e
		return p, nil
	}
	etcd, err := ensure(ctx, progress, root, tools, etcdTool())
	if err != nil {
		return Paths{}, err
	}
	p.Etcd = filepath.Join(etcd, "etcd")
	return p, nil
}

// PrepareNode builds or finds the node tier's binaries (kubelet, kube-controller-manager,
// kube-scheduler), like Prepare. The first build compiles the kubelet's own dependencies
// beside the API server's (minutes; README.md).
func PrepareNode(ctx context.Context, progress io.Writer) (NodePaths, error) {
	root, err := CacheRoot()
	if err != nil {
		return NodePaths{}, err
	}
	tools, err := toolsDir()
	if err != nil {
		return NodePaths{}, err
	}
	dir, err := ensure(ctx, progress, root, tools, kubeNodeTool())
	if err != nil {
		return NodePaths{}, err
	}
	return NodePaths{
		Kubelet:               filepath.Join(dir, "kubelet"),
		KubeControllerManager: filepath.Join(dir, "kube-controller-manager"),
		KubeScheduler:         filepath.Join(dir, "kube-scheduler"),
	}, nil
}

// CacheRoot is where built binaries live: $NFTPROXY_TOOLS_CACHE, else the user cache directory
// ($XDG_CACHE_HOME or ~/.cache) + nftproxy/tools. It is outside the repository so a clean
// checkout, `git clean` or a second worktree reuse the same builds.
func CacheRoot() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		return filepath.Abs(d)
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("tools cache: %w (set %s)", err, EnvCache)
	}
	return filepath.Join(d, "nftproxy", "tools"), nil
}

// toolsDir finds the helper modules in the checkout that runs the test or command, through the
// go command (the working directory is anywhere inside the main module).
func toolsDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the nftproxy module")
	}
	dir := filepath.Join(filepath.Dir(gomod), "test", "cluster", "tools")
	if _, err := os.Stat(filepath.Join(dir, "kube", "go.mod")); err != nil {
		return "", fmt.Errorf("helper modules not found under %s: %w", dir, err)
	}
	return dir, nil
}

// ensure returns the cache folder holding tl's binaries, building it if missing. Folders are
// complete or absent: a build goes to a temporary folder renamed into place at the end.
func ensure(ctx context.Context, progress io.Writer, root, tools string, tl tool) (string, error) {
	src := filepath.Join(tools, tl.module)
	key, err := cacheKey(src, tl)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, tl.name+"-"+tl.version+"-"+key)
	if complete(dir, tl) {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("tools cache: %w", err)
	}
	unlock, err := lockFile(ctx, filepath.Join(root, tl.name+".lock"), progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(dir, tl) { // built by whoever held the lock
		return dir, nil
	}
	tmp, err := os.MkdirTemp(root, ".build-"+tl.name+"-")
	if err != nil {
		return "", fmt.Errorf("tools cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := build(ctx, progress, src, tmp, tl); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("tools cache: %w", err)
	}
	return dir, nil
}

// complete reports whether dir holds every binary tl builds.
func complete(dir string, tl tool) bool {
	for _, b := range tl.binaries {
		if st, err := os.Stat(filepath.Join(dir, b.name)); err != nil || !st.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// cacheKey hashes what decides the binaries' content: the helper module's go.mod and go.sum, the
// Go version, the target platform and the build flags.
func cacheKey(src string, tl tool) (string, error) {
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("helper module %s: %w", tl.module, err)
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	gover, err := exec.Command("go", "env", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOVERSION: %w", err)
	}
	fmt.Fprintf(h, "%s %s/%s %s %q\n", strings.TrimSpace(string(gover)), runtime.GOOS, runtime.GOARCH, tl.binaries, tl.ldflags)
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// build runs `go build` in the helper module src, writing the binaries into out. The
// environment is pinned so the build does not depend on the caller's: the machine's own Go
// (no toolchain download), no workspace, static binaries, go.sum as committed.
func build(ctx context.Context, progress io.Writer, src, out string, tl tool) error {
	ldflags := "-s -w"
	if tl.ldflags != "" {
		ldflags += " " + tl.ldflags
	}
	args := []string{"build", "-trimpath", "-ldflags=" + ldflags, "-o", out + string(filepath.Separator)}
	names := make([]string, len(tl.binaries))
	for i, b := range tl.binaries {
		args = append(args, b.pkg)
		names[i] = b.name
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(),
		"GOFLAGS=-mod=readonly -buildvcs=false", "GOWORK=off", "GOTOOLCHAIN=local", "CGO_ENABLED=0")
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	fmt.Fprintf(progress, "cluster: building %s (%s %s) into %s; the first build takes minutes\n",
		strings.Join(names, ", "), tl.name, tl.version, filepath.Dir(out))
	start := time.Now()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				fmt.Fprintf(progress, "cluster: still building %s (%s)\n", tl.name, time.Since(start).Round(time.Second))
			}
		}
	}()
	err := cmd.Run()
	close(done)
	if err != nil {
		return fmt.Errorf("build %s %s in %s: %w\n%s", tl.name, tl.version, src, err, output.String())
	}
	for _, b := range tl.binaries {
		if err := os.Rename(filepath.Join(out, defaultBinaryName(b.pkg)), filepath.Join(out, b.name)); err != nil {
			return fmt.Errorf("build %s: %w", tl.name, err)
		}
	}
	fmt.Fprintf(progress, "cluster: built %s in %s\n", tl.name, time.Since(start).Round(time.Second))
	return nil
}

// defaultBinaryName is the file name `go build -o DIR/` gives a main package: its last path
// element, or the one before a major-version suffix (go.etcd.io/etcd/server/v3 -> server).
func defaultBinaryName(pkg string) string {
	elems := strings.Split(pkg, "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && len(last) > 1 && last[0] == 'v' && strings.Trim(last[1:], "0123456789") == "" {
		return elems[len(elems)-2]
	}
	return last
}
