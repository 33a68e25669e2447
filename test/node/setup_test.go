package node

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/netns"
)

// Names and tags the tier uses.
const (
	// The nftproxy image is built twice from the same tree with two versions stamped in, so the
	// DaemonSet's rolling update really changes the binary.
	tagOld = "node-1"
	tagNew = "node-2"
	// waitBound bounds each wait for the cluster to converge; only a broken node hits it.
	waitBound = 3 * time.Minute
)

// repoRoot is the checkout's root, relative to this package.
var repoRoot = filepath.Join("..", "..")

// env is one running cluster with one real node and nftproxy deployed on it.
type env struct {
	t       *testing.T
	c       *cluster.Cluster
	cs      kubernetes.Interface
	cp      *ControlPlane
	nodes   []*Node
	node    *Node  // the first: the client's route to the Service ranges leads there
	apiURL  string // the API server as the node sees it
	images  map[string]string
	overlay string // the kustomize overlay folder
	figures *figures
	// procStart and firstSync are the last daemon process's start (Unix seconds) and its first
	// sync, from its metrics.
	procStart float64
	firstSync time.Duration
	// kubeletStart is when the first kubelet started.
	kubeletStart time.Time
}

// prerequisites are what the tier needs on the machine; Debian packages come from
// test/deps.sh.
var prerequisites = []struct{ path, hint string }{
	{"containerd", "apt-get install containerd (test/deps.sh)"},
	{"ctr", "apt-get install containerd (test/deps.sh)"},
	{"runc", "apt-get install runc (test/deps.sh)"},
	{"/usr/lib/cni/bridge", "apt-get install containernetworking-plugins (test/deps.sh)"},
	{"/usr/lib/cni/host-local", "apt-get install containernetworking-plugins (test/deps.sh)"},
	{"/usr/lib/cni/loopback", "apt-get install containernetworking-plugins (test/deps.sh)"},
	{"nsenter", "apt-get install util-linux"},
	{"unshare", "apt-get install util-linux"},
	{"ip", "apt-get install iproute2"},
}

// require skips the tier where the cluster tier is off (make unit, NFTPROXY_SKIP_CLUSTER,
// -short) or on NFTPROXY_SKIP_NODE, and for a user other than root outside CI (as the kernel
// tiers do). Otherwise a missing prerequisite fails it, saying what to install: in CI, or as
// root (make test installs the packages first), it never turns into a skip.
func require(t *testing.T) {
	t.Helper()
	cluster.Skip(t)
	if os.Getenv("NFTPROXY_SKIP_NODE") != "" {
		t.Skip("NFTPROXY_SKIP_NODE is set: node tier skipped")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "" {
			t.Skip("needs root: runs a kubelet, containerd and network namespaces")
		}
		t.Fatal("node tier: needs root (runs a kubelet, containerd and network namespaces); CI must run it as root")
	}
	var missing []string
	for _, p := range prerequisites {
		if strings.HasPrefix(p.path, "/") {
			if _, err := os.Stat(p.path); err != nil {
				missing = append(missing, p.path+": "+p.hint)
			}
		} else if _, err := exec.LookPath(p.path); err != nil {
			missing = append(missing, p.path+": "+p.hint)
		}
	}
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		missing = append(missing, "br_netfilter (bridged pod traffic must pass netfilter, as kubeadm requires): modprobe br_netfilter")
	}
	if len(missing) > 0 {
		t.Fatalf("node tier prerequisites missing (run test/deps.sh as root, or set NFTPROXY_SKIP_NODE=1 to skip the tier):\n  %s", strings.Join(missing, "\n  "))
	}
}

// logWriter sends build progress to the test log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// start brings up the cluster, the controllers, the node with its images, and waits for the
// Node to be Ready. Everything is torn down and the host restored when t ends.
func start(t *testing.T) *env {
	require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	e := &env{t: t, images: map[string]string{}, figures: newFigures()}
	began := time.Now()
	bins, err := cluster.PrepareNode(ctx, logWriter{t})
	if err != nil {
		t.Fatalf("node binaries: %v", err)
	}
	pki := t.TempDir()
	ca, err := NewClientCA(pki)
	if err != nil {
		t.Fatal(err)
	}
	// A node identity as kubeadm gives one: a client certificate, the Node authorizer and
	// NodeRestriction admission.
	e.c = cluster.Start(t, cluster.Options{SingleStack: true, APIServerArgs: []string{
		"--client-ca-file=" + ca.File,
		"--authorization-mode=Node", // appended to test/cluster's RBAC: a list flag
		"--enable-admission-plugins=NodeRestriction",
	}})
	e.cs = e.c.Client()
	caFile := filepath.Join(pki, "cluster-ca.crt")
	if err := os.WriteFile(caFile, e.c.Admin().CAData, 0o644); err != nil {
		t.Fatal(err)
	}
	e.cp, err = StartControlPlane(e.c.Dir(), bins.KubeControllerManager, bins.KubeScheduler,
		e.c.AdminKubeconfig, e.c.ServiceAccountSigningKeyFile(), caFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(e.cp.Logs(40))
		}
		e.cp.Stop()
	})

	client := netns.New(t, "client")
	if err := Client(client); err != nil {
		t.Fatal(err)
	}
	e.buildImages(ctx)
	count := 1
	if fullProfile() {
		count = 2
	}
	for i := 1; i <= count; i++ {
		e.startNode(ctx, i, count, client, ca, caFile, bins.Kubelet)
	}
	e.node = e.nodes[0]
	for _, n := range e.nodes {
		e.waitNodeReady(ctx, n.Name)
	}
	e.figures.set("kubelet start -> every Node Ready", time.Since(e.kubeletStart))
	e.figures.set("set-up (binaries cached) -> every Node Ready", time.Since(began))
	return e
}

// startNode starts node i of count: its network, containerd with the images, the kubelet.
func (e *env) startNode(ctx context.Context, i, count int, client *netns.NS, ca *ClientCA, caFile, kubelet string) {
	t := e.t
	ns := netns.New(t, "node")
	// The same URL in every node (the API server's port on each node's loopback): the
	// ConfigMap names one api-server for all of them.
	e.apiURL = e.c.RelaySamePort(t, ns)
	// The node's folder is short (socket paths must fit 108 bytes) and outside t.TempDir:
	// Teardown removes it once its mounts are gone.
	dir, err := os.MkdirTemp("", "nftnode-")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := ca.Issue("system:node:"+NodeName(i), "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Index: i, Name: NodeName(i), Kubelet: kubelet, Dir: dir, APIServer: e.apiURL,
		CAFile: caFile, ClientCert: certFile, ClientKey: keyFile, Logf: t.Logf,
	}
	n, err := NewNode(ctx, cfg, ns, client, count)
	if n != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Log(n.Logs(60))
			}
			for _, err := range n.Teardown() {
				t.Errorf("%s teardown: %v", n.Name, err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	e.nodes = append(e.nodes, n)
	importStart := time.Now()
	for _, ref := range []string{PauseImage, EchoImage + ":1", EchoImage + ":2", NftproxyRepo + ":" + tagOld, NftproxyRepo + ":" + tagNew} {
		if err := n.ImportImage(ctx, e.images[ref]); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: images imported in %s", n.Name, time.Since(importStart).Round(time.Millisecond))
	if e.kubeletStart.IsZero() {
		e.kubeletStart = time.Now()
	}
	if err := n.StartKubelet(); err != nil {
		t.Fatal(err)
	}
}

// buildImages builds nftproxy's image as `make image` does (two tags), the pause image and the
// backend (echo, two tags) into OCI archives.
func (e *env) buildImages(ctx context.Context) {
	t := e.t
	start := time.Now()
	dir := t.TempDir()
	abs, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{tagOld, tagNew} {
		a, err := BuildNftproxyImage(ctx, abs, dir, tag)
		if err != nil {
			t.Fatal(err)
		}
		e.images[NftproxyRepo+":"+tag] = a
	}
	a, err := BuildBinaryImage(ctx, abs, dir, "./test/node/cmd/pause", PauseImage, nil)
	if err != nil {
		t.Fatal(err)
	}
	e.images[PauseImage] = a
	for _, tag := range []string{"1", "2"} {
		a, err := BuildBinaryImage(ctx, abs, dir, "./test/node/cmd/echo", EchoImage+":"+tag, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.images[EchoImage+":"+tag] = a
	}
	e.figures.set("images built", time.Since(start))
}

// waitNodeReady waits for a Node's Ready condition.
func (e *env) waitNodeReady(ctx context.Context, name string) {
	e.waitFor(ctx, "Node "+name+" Ready", func() (bool, string) {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, c.Reason + ": " + c.Message
			}
		}
		return false, "no Ready condition yet"
	})
}

// waitFor polls cond every 100 ms up to waitBound; a timeout fails the test with cond's last
// word and the daemons' logs. The kubelet or a controller exiting fails it at once.
func (e *env) waitFor(ctx context.Context, what string, cond func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(waitBound)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if err := e.cp.Check(); err != nil {
			e.t.Fatalf("waiting for %s: %v", what, err)
		}
		for _, n := range e.nodes {
			if n.kubelet != nil && !n.KubeletRunning() {
				e.t.Fatalf("waiting for %s: %s's kubelet exited: %v\n%s", what, n.Name, n.kubelet.err, n.kubelet.tail(40))
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			e.t.Fatalf("%s: not within %s (last: %s)", what, waitBound, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// writeOverlay writes the overlay an operator of this cluster would keep beside deploy/: the
// API server's address (the node's view of it), the pod and Service ranges, the image tag.
func (e *env) writeOverlay(tag string) string {
	t := e.t
	if e.overlay == "" {
		e.overlay = t.TempDir()
	}
	base, err := filepath.Abs(filepath.Join(repoRoot, "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(e.overlay, base)
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [%s]
patches:
  - target: {kind: ConfigMap, name: nftproxy}
    patch: |
      - {op: replace, path: /data/api-server, value: %q}
      - {op: replace, path: /data/cluster-cidr, value: %q}
      - {op: replace, path: /data/service-cidr, value: %q}
images:
  - {name: %s, newName: %s, newTag: %s}
`, rel, e.apiURL, ClusterCIDR, cluster.ServiceCIDRv4, NftproxyRepo, NftproxyRepo, tag)
	if err := os.WriteFile(filepath.Join(e.overlay, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return e.overlay
}

// deploy builds the overlay with kustomize (as `kubectl apply -k` does) and applies it.
func (e *env) deploy(ctx context.Context, tag string) {
	if err := cluster.Apply(ctx, e.c.Config(), e.overlayObjects(tag), "kubectl", false); err != nil {
		e.t.Fatal(err)
	}
}

// overlayObjects is the kustomize build of the overlay for tag.
func (e *env) overlayObjects(tag string) []*unstructured.Unstructured {
	t := e.t
	dir := e.writeOverlay(tag)
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
	return objs
}

// ensureNamespace creates a namespace if it is missing.
func (e *env) ensureNamespace(ctx context.Context, name string) {
	_, err := e.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
}
