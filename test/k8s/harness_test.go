// Package k8s is the cluster integration tier: nftproxy in a lab node (test/lab) watching a
// real kube-apiserver (test/cluster) with the deploy/ DaemonSet's own ServiceAccount, RBAC,
// flags and capabilities; Services written through the API are proven with packets.
package k8s

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

const (
	nodeName = "node-1"
	testNS   = "default"
	// waitBound bounds every wait: a broken daemon fails a test instead of hanging the tier.
	waitBound    = 60 * time.Second
	pollInterval = 5 * time.Millisecond
)

// daemonBinary is built once by TestMain; empty when the tier is skipped.
var daemonBinary string

func TestMain(m *testing.M) {
	if os.Getenv("NFTPROXY_UNIT_ONLY") != "" || os.Getenv("NFTPROXY_SKIP_CLUSTER") != "" || os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "nftproxy-k8s-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "k8s tier:", err)
		os.Exit(1)
	}
	bin, err := lab.BuildDaemon(dir)
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, "k8s tier:", err)
		os.Exit(1)
	}
	daemonBinary = bin
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one scenario: an API server, a lab node and the daemon in it.
type env struct {
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	cs     kubernetes.Interface // admin, for the test's own writes
	lab    *lab.Lab
	daemon *lab.Process
}

// newEnv starts an API server, applies the deploy/ base with config overrides (the lab's
// CIDRs plus cfg), creates the lab and the Node, and starts the daemon in the node exactly as
// the DaemonSet runs it: its arguments, the ServiceAccount token bound by its ClusterRole, and
// only CAP_NET_ADMIN in the capability bounding set.
func newEnv(t *testing.T, cfg map[string]string) *env {
	t.Helper()
	return newEnvFor(t, cfg, 4*waitBound)
}

// newEnvFor is newEnv for a scenario that lasts up to bound (the daemon and every call of the
// scenario stop then).
func newEnvFor(t *testing.T, cfg map[string]string, bound time.Duration) *env {
	t.Helper()
	netns.Skip(t)
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, c: c, cs: c.Client()}

	objs := buildDeploy(t)
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
	e.lab = lab.New(t, lab.Options{Pods: 2})

	ttl := int64(3600)
	tr, err := e.cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, "nftproxy",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for kube-system/nftproxy: %v", err)
	}
	sa := cluster.Access{CAData: c.Admin().CAData, Token: tr.Status.Token, User: "system:serviceaccount:kube-system:nftproxy"}
	kubeconfig := c.KubeconfigFor(t, e.lab.Node, sa)

	argv := []string{"setpriv", "--bounding-set=-all,+net_admin", "--no-new-privs", "--", daemonBinary}
	argv = append(argv, daemonArgs(t, objs, nodeName)...)
	argv = append(argv, "--kubeconfig", kubeconfig)
	p, err := e.lab.StartInNode(ctx, argv...)
	if err != nil {
		t.Fatal(err)
	}
	e.daemon = p
	return e
}

func (e *env) createNode() {
	e.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: lab.NodeIPv4}, {Type: corev1.NodeInternalIP, Address: lab.NodeIPv6}}}}
	created, err := e.cs.CoreV1().Nodes().Create(e.ctx, n, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("create Node: %v", err)
	}
	created.Status = n.Status
	if _, err := e.cs.CoreV1().Nodes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("Node status: %v", err)
	}
}

// svc describes a ClusterIP Service on port 80 and its one EndpointSlice.
type svc struct {
	name        string
	ip          int // ClusterIPv4(ip)
	labels      map[string]string
	annotations map[string]string
	pods        []int // endpoints: pod-n
}

func (s svc) vip() string { return netip.AddrPortFrom(lab.ClusterIPv4(s.ip), 80).String() }

// marker is how the ruleset names the Service (comments "ns/name/proto/port").
func (s svc) marker() string { return `"` + testNS + "/" + s.name + "/" }

func (e *env) createService(s svc) {
	e.t.Helper()
	obj := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: s.name, Labels: s.labels, Annotations: s.annotations},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: lab.ClusterIPv4(s.ip).String(),
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
	if _, err := e.cs.CoreV1().Services(testNS).Create(e.ctx, obj, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create Service %s: %v", s.name, err)
	}
	if _, err := e.cs.DiscoveryV1().EndpointSlices(testNS).Create(e.ctx, s.slice(), metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("create EndpointSlice of %s: %v", s.name, err)
	}
}

// slice is the Service's EndpointSlice as the EndpointSlice controller would write it: the
// Service's labels plus kubernetes.io/service-name.
func (s svc) slice() *discoveryv1.EndpointSlice {
	lbls := map[string]string{discoveryv1.LabelServiceName: s.name}
	for k, v := range s.labels {
		lbls[k] = v
	}
	port, proto, name := int32(80), corev1.ProtocolTCP, "http"
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: testNS, Name: s.name + "-v4", Labels: lbls},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	ready, node := true, nodeName
	for _, n := range s.pods {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{lab.PodIPv4(n).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node})
	}
	return sl
}

// setEndpoints replaces the endpoints of s's slice with pods.
func (e *env) setEndpoints(s svc, pods ...int) {
	e.t.Helper()
	s.pods = pods
	cur, err := e.cs.DiscoveryV1().EndpointSlices(testNS).Get(e.ctx, s.name+"-v4", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	next := s.slice()
	next.ResourceVersion = cur.ResourceVersion
	if _, err := e.cs.DiscoveryV1().EndpointSlices(testNS).Update(e.ctx, next, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("update EndpointSlice of %s: %v", s.name, err)
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
	start := time.Now()
	for {
		rs := e.ruleset()
		if cond(rs) {
			return time.Since(start)
		}
		select {
		case <-e.daemon.Done():
			e.t.Fatalf("waiting for %s: the daemon exited (%v); ruleset:\n%s", what, e.daemon.Err(), rs)
		default:
		}
		if time.Since(start) > waitBound {
			e.t.Fatalf("waiting for %s: not there after %v; ruleset:\n%s", what, waitBound, rs)
		}
		time.Sleep(pollInterval)
	}
}

func (e *env) waitProgrammed(s svc) time.Duration {
	e.t.Helper()
	return e.waitFor("Service "+s.name, func(rs string) bool { return strings.Contains(rs, s.marker()) })
}

// healthz asks the daemon's /healthz inside the node and returns the HTTP status line.
func (e *env) healthz() string { e.t.Helper(); return e.health("/healthz") }

// health asks the daemon's health endpoint path inside the node; the HTTP status line.
func (e *env) health(path string) string {
	e.t.Helper()
	var status string
	err := e.lab.Node.Do(func() error {
		// The socket is created on this (namespace-switched) thread; it stays in the node.
		conn, err := net.DialTimeout("tcp", "127.0.0.1:10256", 5*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.0\r\n\r\n", path); err != nil {
			return err
		}
		status, err = bufio.NewReader(conn).ReadString('\n')
		return err
	})
	if err != nil {
		e.t.Fatalf("%s: %v", path, err)
	}
	return strings.TrimSpace(status)
}
