// Package k8s is the cluster integration tier: nftproxy in a lab node (test/lab) watching a
// real kube-apiserver (test/cluster) with the deploy/ DaemonSet's own ServiceAccount, RBAC,
// flags and capabilities; Services written through the API are proven with packets.
package k8s

import (
	"cmp"
	"context"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

const (
	testNS = "default"
	// waitBound bounds every wait: a broken daemon fails a test instead of hanging the tier.
	waitBound    = 60 * time.Second
	pollInterval = 5 * time.Millisecond
)

// daemonBinary is built once by TestMain; empty when the tier is skipped.
var daemonBinary string

func TestMain(m *testing.M) {
	os.Exit(tier.Main(m, "k8s", tier.SkipReason("NFTPROXY_SKIP_CLUSTER"), func(bin, _ string) error {
		daemonBinary = bin
		return nil
	}))
}

// envKubeProxyVersion names the kube-proxy release the tests that run one use instead of their
// default (any release test/cluster builds: cluster.KubeVersion, cluster.KubeProxyLatestVersion).
const envKubeProxyVersion = "NFTPROXY_KUBE_PROXY_VERSION"

// kubeProxyBinary is the kube-proxy a migration test runs: the newest release built
// (cluster.KubeProxyLatestVersion), or the one NFTPROXY_KUBE_PROXY_VERSION names.
func kubeProxyBinary(t *testing.T, c *cluster.Cluster) string {
	t.Helper()
	b, err := c.Binaries.KubeProxyAt(cmp.Or(os.Getenv(envKubeProxyVersion), cluster.KubeProxyLatestVersion))
	if err != nil {
		t.Fatalf("%s: %v", envKubeProxyVersion, err)
	}
	return b
}

// kubeProxyReleases are the releases a test run against every kube-proxy built takes, newest
// first; only NFTPROXY_KUBE_PROXY_VERSION's when it is set.
func kubeProxyReleases() []string {
	if v := os.Getenv(envKubeProxyVersion); v != "" {
		return []string{v}
	}
	return []string{cluster.KubeProxyLatestVersion, cluster.KubeVersion}
}

// env is one scenario: an API server, a lab node and the daemon in it.
type env struct {
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	cs     kubernetes.Interface // admin, for the test's own writes
	lab    *lab.Lab
	daemon *lab.Process
	// healthzAddr and metricsAddr are where the daemon listens in the node (its bind-address
	// flags, a wildcard host replaced by loopback).
	healthzAddr, metricsAddr string
	// kubeconfig is the ServiceAccount's kubeconfig file (the DaemonSet's identity).
	kubeconfig string
}

// newEnv starts an API server, applies the deploy/ base with config overrides (the lab's
// CIDRs plus cfg), creates the lab and the Node, and starts the daemon in the node exactly as
// the DaemonSet runs it: its arguments, the ServiceAccount token bound by its ClusterRole, and
// only CAP_NET_ADMIN in the capability bounding set.
func newEnv(t *testing.T, cfg map[string]string) *env {
	t.Helper()
	return newLabEnv(t, cfg, lab.Options{Pods: 2})
}

// newEnvFor is newEnv for a scenario that lasts up to bound (the daemon and every call of the
// scenario stop then).
func newEnvFor(t *testing.T, cfg map[string]string, bound time.Duration) *env {
	t.Helper()
	e, objs := setupEnvFor(t, deployDir, cfg, lab.Options{Pods: 2}, bound)
	e.start(daemonArgs(t, objs, fixture.NodeName), true)
	return e
}

// newLabEnv is newEnv with a lab of the given shape (its pods' ports, for ranges and all-ports).
func newLabEnv(t *testing.T, cfg map[string]string, opts lab.Options) *env {
	t.Helper()
	e, objs := setupEnv(t, deployDir, cfg, opts)
	e.start(daemonArgs(t, objs, fixture.NodeName), true)
	return e
}

// setupEnv is newLabEnv without the daemon: the kustomization dir built and applied (with the
// ConfigMap overrides), the Node, the lab and the ServiceAccount's kubeconfig (e.kubeconfig).
func setupEnv(t *testing.T, dir string, cfg map[string]string, opts lab.Options) (*env, []*unstructured.Unstructured) {
	t.Helper()
	return setupEnvFor(t, dir, cfg, opts, 4*waitBound)
}

// setupEnvFor is setupEnv for a scenario that lasts up to bound.
func setupEnvFor(t *testing.T, dir string, cfg map[string]string, opts lab.Options, bound time.Duration) (*env, []*unstructured.Unstructured) {
	t.Helper()
	netns.Skip(t)
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, c: c, cs: c.Client()}

	objs := buildKustomization(t, dir)
	conf := map[string]string{
		"cluster-cidr": lab.PodCIDRv4 + "," + lab.PodCIDRv6,
		"service-cidr": lab.ServiceCIDRv4 + "," + lab.ServiceCIDRv6,
	}
	for k, v := range cfg {
		conf[k] = v
	}
	setConfig(t, objs, conf)
	if err := apply(ctx, c.Config(), objs, false); err != nil {
		t.Fatal(err)
	}
	e.createNode()
	e.lab = lab.New(t, opts)

	ttl := int64(3600)
	tr, err := e.cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "nftproxy",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for kube-system/nftproxy: %v", err)
	}
	sa := cluster.Access{CAData: c.Admin().CAData, Token: tr.Status.Token, User: "system:serviceaccount:kube-system:nftproxy"}
	e.kubeconfig = c.KubeconfigFor(t, e.lab.Node, sa)
	return e, objs
}

// start runs the daemon in the node with args (plus --kubeconfig e.kubeconfig when
// withKubeconfig), as the DaemonSet does: only CAP_NET_ADMIN in the bounding set, no new
// privileges. The listen addresses are read from args when given, else kube-proxy's defaults.
func (e *env) start(args []string, withKubeconfig bool) {
	e.t.Helper()
	e.healthzAddr, e.metricsAddr = listenAddr(e.t, args, "--healthz-bind-address"), listenAddr(e.t, args, "--metrics-bind-address")
	argv := []string{"setpriv", "--bounding-set=-all,+net_admin", "--no-new-privs", "--", daemonBinary}
	argv = append(argv, args...)
	if withKubeconfig {
		argv = append(argv, "--kubeconfig", e.kubeconfig)
	}
	p, err := e.lab.StartInNode(e.ctx, argv...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.daemon = p
}

// createNode creates the Node the daemon runs as, with the lab's node addresses.
func (e *env) createNode() {
	e.t.Helper()
	n := fixture.LabNode().Object()
	created, err := e.cs.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create Node: %v", err)
	}
	created.Status = n.Status
	if _, err := e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("Node status: %v", err)
	}
}

// httpService is a ClusterIP Service on ClusterIPv4(ip) port 80 (TCP, named http) with endpoints on
// pods: the shape most scenarios of the tier use.
func httpService(name string, ip int, pods ...int) fixture.Service {
	return fixture.Service{Name: name, Namespace: testNS, ClusterIPs: []netip.Addr{lab.ClusterIPv4(ip)},
		Ports: []fixture.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}}, Endpoints: fixture.Pods(pods...)}
}

// vip is "ClusterIP:80" of s.
func vip(s fixture.Service) string { return netip.AddrPortFrom(s.ClusterIPs[0], 80).String() }

// marker is how the ruleset names the Service (comments "ns/name/proto/port").
func marker(s fixture.Service) string { return `"` + s.Key() }

// createService creates s and its EndpointSlices through the API, as the EndpointSlice
// controller would write them, and writes its LoadBalancerIPs in its status as a load balancer
// controller would; it returns the Service as the API server stored it.
func (e *env) createService(s fixture.Service) *corev1.Service {
	e.t.Helper()
	obj := s.Object()
	created, err := e.cs.CoreV1().Services(s.NS()).Create(e.ctx, obj, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create Service %s: %v", s.Name, err)
	}
	if len(obj.Status.LoadBalancer.Ingress) > 0 {
		// Another writer (the allocator controller's annotation) may update the Service in
		// between: read it again and retry, as a load balancer controller would.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := e.cs.CoreV1().Services(s.NS()).Get(e.ctx, s.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status = obj.Status
			created, err = e.cs.CoreV1().Services(s.NS()).UpdateStatus(e.ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			e.t.Fatalf("status of Service %s: %v", s.Name, err)
		}
	}
	for _, sl := range s.Slices() {
		if _, err := e.cs.DiscoveryV1().EndpointSlices(s.NS()).Create(e.ctx, sl, metav1.CreateOptions{}); err != nil {
			e.t.Fatalf("create EndpointSlice of %s: %v", s.Name, err)
		}
	}
	return created
}

// setEndpoints replaces the endpoints of s's slices with pods.
func (e *env) setEndpoints(s fixture.Service, pods ...int) {
	e.t.Helper()
	s.Endpoints = fixture.Pods(pods...)
	for _, next := range s.Slices() {
		cur, err := e.cs.DiscoveryV1().EndpointSlices(s.NS()).Get(e.ctx, next.Name, metav1.GetOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		next.ResourceVersion = cur.ResourceVersion
		if _, err := e.cs.DiscoveryV1().EndpointSlices(s.NS()).Update(e.ctx, next, metav1.UpdateOptions{}); err != nil {
			e.t.Fatalf("update EndpointSlice of %s: %v", s.Name, err)
		}
	}
}

func (e *env) ruleset() string {
	e.t.Helper()
	out, err := e.lab.Ruleset()
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitFor polls the node's ruleset until cond holds and returns how long that took; it fails
// the test after waitBound or when the daemon exits.
func (e *env) waitFor(what string, cond func(ruleset string) bool) time.Duration {
	e.t.Helper()
	return tier.WaitRuleset(e.t, e.ctx, e.lab, e.daemon, waitBound, pollInterval, what, cond)
}

func (e *env) waitProgrammed(s fixture.Service) time.Duration {
	e.t.Helper()
	return e.waitFor("Service "+s.Name, func(rs string) bool { return strings.Contains(rs, marker(s)) })
}

// healthz asks the daemon's /healthz inside the node and returns the HTTP status line.
func (e *env) healthz() string { e.t.Helper(); return e.health("/healthz") }

// health asks the daemon's health endpoint path inside the node; the HTTP status line.
func (e *env) health(path string) string {
	e.t.Helper()
	r, err := tier.Get(e.ctx, e.lab.Node, "http://"+e.healthzAddr+path)
	if err != nil {
		e.t.Fatalf("%s: %v", path, err)
	}
	return r.Status
}

// listenAddr is the address a client in the node reaches the daemon's flag at: its value with a
// wildcard host (0.0.0.0, ::) replaced by loopback.
func listenAddr(t *testing.T, args []string, flag string) string {
	t.Helper()
	for _, a := range args {
		v, ok := strings.CutPrefix(a, flag+"=")
		if !ok {
			continue
		}
		host, port, err := net.SplitHostPort(v)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		switch host {
		case "", "0.0.0.0":
			host = "127.0.0.1"
		case "::":
			host = "::1"
		}
		return net.JoinHostPort(host, port)
	}
	return map[string]string{"--healthz-bind-address": "127.0.0.1:10256", "--metrics-bind-address": "127.0.0.1:10249"}[flag]
}
