package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/controller"
	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// allocatorNS is where deploy/allocator puts the controller's ServiceAccount and Lease.
const allocatorNS = "kube-system"

// startAllocator applies the deploy/allocator base (its ServiceAccount, RBAC, ConfigMap; the
// Deployment is stored but nothing runs it) and runs the node-port block controller in the test
// process under that ServiceAccount's token, with the base's block range, as the Deployment
// would run it. It stops when the test ends (before the API server does).
func (e *env) startAllocator() {
	e.t.Helper()
	dir := filepath.Join(deployDir, "allocator")
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		e.t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []*unstructured.Unstructured
	blocks := ""
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			e.t.Fatalf("kustomize resource %s: %v", r.CurId(), err)
		}
		u := &unstructured.Unstructured{Object: obj}
		if u.GetKind() == "ConfigMap" {
			blocks, _, _ = unstructured.NestedString(u.Object, "data", "range-node-port-range")
		}
		objs = append(objs, u)
	}
	if err := apply(e.ctx, e.c.Config(), objs, false); err != nil {
		e.t.Fatal(err)
	}
	ttl := int64(3600)
	tr, err := e.cs.CoreV1().ServiceAccounts(allocatorNS).CreateToken(e.ctx, "nftproxy-allocator",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("token for %s/nftproxy-allocator: %v", allocatorNS, err)
	}
	sa := cluster.Access{Server: e.c.URL, CAData: e.c.Admin().CAData, Token: tr.Status.Token,
		User: "system:serviceaccount:" + allocatorNS + ":nftproxy-allocator"}
	cs, err := kubernetes.NewForConfig(sa.RESTConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	r, err := allocator.ParseRange(blocks)
	if err != nil {
		e.t.Fatalf("deploy/allocator ConfigMap range-node-port-range %q: %v", blocks, err)
	}
	c, err := controller.New(controller.Config{Client: cs, BlockRange: r, Identity: "allocator-0",
		LeaseNamespace: allocatorNS, Logger: testr.NewWithOptions(e.t, testr.Options{LogTimestamp: true}).WithName("allocator")})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		tier.AwaitStop(e.t, "allocator controller", done, waitBound)
	})
}

// waitService polls the Service name through the API until cond holds (cond says what it saw)
// and returns it.
func (e *env) waitService(name, what string, cond func(*corev1.Service) (bool, string)) *corev1.Service {
	e.t.Helper()
	var got *corev1.Service
	tier.Until(e.t, e.ctx, waitBound, 50*time.Millisecond, what, func() (bool, string) {
		s, err := e.cs.CoreV1().Services(testNS).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = s
		return cond(s)
	})
	return got
}

// updateService reads the Service name, changes it with edit and writes it back with a plain
// update (what kubectl edit or replace sends, not a patch), again on a conflict with another
// writer; it returns the Service as the API server stored it.
func (e *env) updateService(name, what string, edit func(*corev1.Service)) *corev1.Service {
	e.t.Helper()
	var out *corev1.Service
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := e.cs.CoreV1().Services(testNS).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		edit(s)
		out, err = e.cs.CoreV1().Services(testNS).Update(e.ctx, s, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.t.Fatalf("%s: %v", what, err)
	}
	return out
}

// blockIs is a waitService condition: the Service's node-port-ranges annotation is want ("" absent).
func blockIs(want string) func(*corev1.Service) (bool, string) {
	return func(s *corev1.Service) (bool, string) {
		v, ok := s.Annotations[annotation.NodePortRangesKey]
		if want == "" {
			return !ok, fmt.Sprintf("%s %q (present %v)", annotation.NodePortRangesKey, v, ok)
		}
		return v == want, fmt.Sprintf("%s %q", annotation.NodePortRangesKey, v)
	}
}

// nodePortsMap is the text of the node-port maps of the ruleset (protocol . node port ->
// Service, then protocol . block -> Service), "" when both are missing.
func nodePortsMap(rs string) string {
	var out strings.Builder
	for _, head := range []string{"map service-nodeports {", "map service-nodeport-ranges {"} {
		i := strings.Index(rs, head)
		if i < 0 {
			continue
		}
		j := strings.Index(rs[i:], "\n\t}")
		if j < 0 {
			j = len(rs) - i
		}
		out.WriteString(rs[i : i+j])
	}
	return out.String()
}

// prober sends packets from client 1 of e's lab.
type prober struct {
	t *testing.T
	e *env
}

// reaches: network to:port is answered by pod on that same port (want, the pod's port, when
// the Service maps it elsewhere).
func (p prober) reaches(network string, to netip.Addr, port, want uint16, pod int) {
	p.t.Helper()
	addr := netip.AddrPortFrom(to, port).String()
	r := p.e.lab.Client(1).Dial(p.e.ctx, network, addr)
	if r.Outcome != lab.Replied || r.Reply.Pod != p.e.lab.Pod(pod).Name || r.Reply.Port != want {
		p.t.Errorf("%s %s: got %v, want a reply from %s on port %d", network, addr, r, p.e.lab.Pod(pod).Name, want)
	}
}

// unanswered: nothing answers network to:port.
func (p prober) unanswered(network string, to netip.Addr, port uint16, why string) {
	p.t.Helper()
	addr := netip.AddrPortFrom(to, port).String()
	if r := p.e.lab.Client(1).Dial(p.e.ctx, network, addr); r.Outcome == lab.Replied {
		p.t.Errorf("%s %s: got %v, want no answer (%s)", network, addr, r, why)
	}
}
