package cluster

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The Go constants name the cache folders; the helper modules decide what is built. They must
// agree.
func TestHelperModulesPinVersions(t *testing.T) {
	tools, err := toolsDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		module, require string
	}{
		{"kube", "k8s.io/kubernetes " + KubeVersion},
		{"kube-proxy-latest", "k8s.io/kubernetes " + KubeProxyLatestVersion},
		{"etcd", "go.etcd.io/etcd/server/v3 " + EtcdVersion},
	} {
		t.Run(tc.module, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(tools, tc.module, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "\t"+tc.require+" ") && !strings.Contains(string(b), "\t"+tc.require+"\n") {
				t.Errorf("tools/%s/go.mod does not require %q", tc.module, tc.require)
			}
		})
	}
}

// Every staging module of the pinned release must be replaced by its matching v0 version, or
// the build resolves k8s.io/kubernetes' relative replace paths and fails.
func TestKubeStagingPinned(t *testing.T) {
	tools, err := toolsDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		module, release string
		staging         int
	}{
		{"kube", KubeVersion, 31},                         // v1.34's staging modules
		{"kube-proxy-latest", KubeProxyLatestVersion, 33}, // v1.37 adds cri-streaming and streaming
	} {
		t.Run(tc.module, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(tools, tc.module, "go.mod"))
			if err != nil {
				t.Fatal(err)
			}
			want := "v0." + strings.TrimPrefix(tc.release, "v1.")
			n := 0
			for _, line := range strings.Split(string(b), "\n") {
				f := strings.Fields(line)
				if len(f) == 4 && f[1] == "=>" && strings.HasPrefix(f[0], "k8s.io/") {
					n++
					if f[2] != f[0] || f[3] != want {
						t.Errorf("replace %s => %s %s, want %s %s", f[0], f[2], f[3], f[0], want)
					}
				}
			}
			if n < tc.staging {
				t.Errorf("%d staging replaces, want every staging module (%d in %s)", n, tc.staging, tc.release)
			}
		})
	}
}

// Every main package a build names is a `tool` of its helper module, so `go mod tidy` there
// keeps its dependencies in go.mod and go.sum (a -mod=readonly build of a package whose
// dependencies are missing fails only when it runs, minutes in).
func TestToolsDeclaredInHelperModules(t *testing.T) {
	tools, err := toolsDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range []tool{kubeTool(), kubeNodeTool(), kubeProxyLatestTool(), etcdTool()} {
		if tl.module == "etcd" {
			continue // etcd's server module is its own main package, required directly
		}
		b, err := os.ReadFile(filepath.Join(tools, tl.module, "go.mod"))
		if err != nil {
			t.Fatal(err)
		}
		for _, bin := range tl.binaries {
			if !strings.Contains(string(b), "\t"+bin.pkg+"\n") && !strings.Contains(string(b), "\ntool "+bin.pkg+"\n") {
				t.Errorf("%s: tools/%s/go.mod has no tool line for %s", tl.name, tl.module, bin.pkg)
			}
		}
	}
}

func TestKubeProxyAt(t *testing.T) {
	p := Paths{KubeProxies: map[string]string{KubeVersion: "/old", KubeProxyLatestVersion: "/new"}}
	if got, err := p.KubeProxyAt(KubeProxyLatestVersion); err != nil || got != "/new" {
		t.Errorf("KubeProxyAt(%s) = %q, %v; want /new", KubeProxyLatestVersion, got, err)
	}
	_, err := p.KubeProxyAt("v1.30.0")
	if err == nil || !strings.Contains(err.Error(), KubeVersion+", "+KubeProxyLatestVersion) {
		t.Errorf("KubeProxyAt(v1.30.0): %v, want an error naming the releases built", err)
	}
}

func TestDefaultBinaryName(t *testing.T) {
	for pkg, want := range map[string]string{
		"k8s.io/kubernetes/cmd/kube-apiserver": "kube-apiserver",
		"go.etcd.io/etcd/server/v3":            "server",
		"example.com/v2tool":                   "v2tool",
		"example.com/cmd/v":                    "v",
	} {
		if got := defaultBinaryName(pkg); got != want {
			t.Errorf("defaultBinaryName(%q) = %q, want %q", pkg, got, want)
		}
	}
}

func TestCacheRootOverride(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvCache, dir)
	got, err := CacheRoot()
	if err != nil || got != dir {
		t.Errorf("CacheRoot() = %q, %v; want %q", got, err, dir)
	}
	t.Setenv(EnvCache, "")
	t.Setenv("XDG_CACHE_HOME", dir)
	got, err = CacheRoot()
	if want := filepath.Join(dir, "nftproxy", "tools"); err != nil || got != want {
		t.Errorf("CacheRoot() = %q, %v; want %q", got, err, want)
	}
}

// A second locker waits while the first holds the lock (here: until its context ends) and gets
// the lock once it is released.
func TestLockFileExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := lockFile(context.Background(), path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var progress strings.Builder
	if _, err := lockFile(ctx, path, &progress); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: err = %v, want deadline exceeded", err)
	}
	if !strings.Contains(progress.String(), "waiting") {
		t.Errorf("no waiting line in progress output %q", progress.String())
	}
	unlock()
	unlock2, err := lockFile(context.Background(), path, io.Discard)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}

// The binaries build (or come from the cache), run, and report the pinned versions; asking
// again returns the same cached files without building.
func TestBinariesBuiltAndCached(t *testing.T) {
	Skip(t)
	ctx, cancel := testContext(t)
	defer cancel()
	first, err := Prepare(ctx, logWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	var progress strings.Builder
	second, err := Prepare(ctx, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(second, first) {
		t.Errorf("second call = %+v, want the cached %+v", second, first)
	}
	if progress.Len() != 0 {
		t.Errorf("second call printed %q, want nothing (cache hit)", progress.String())
	}
	root, err := CacheRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, arg, want string
	}{
		{first.KubeAPIServer, "--version", "Kubernetes " + KubeVersion},
		{first.KubeProxy, "--version", "Kubernetes " + KubeVersion},
		{first.KubeProxies[KubeVersion], "--version", "Kubernetes " + KubeVersion},
		{first.KubeProxies[KubeProxyLatestVersion], "--version", "Kubernetes " + KubeProxyLatestVersion},
		{first.Etcd, "--version", "etcd Version: " + strings.TrimPrefix(EtcdVersion, "v")},
	} {
		out, err := exec.Command(tc.path, tc.arg).CombinedOutput()
		if err != nil {
			t.Errorf("%s %s: %v: %s", tc.path, tc.arg, err, out)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%s %s = %q, want it to contain %q", tc.path, tc.arg, out, tc.want)
		}
		if os.Getenv(EnvEtcd) == "" && !strings.HasPrefix(tc.path, root+string(filepath.Separator)) {
			t.Errorf("%s is not under the cache root %s", tc.path, root)
		}
	}
}
