package nodeport

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/manifest"
)

// The address plan of these tests: no addresses matter, only ports. The node-port range is the
// API server's default; blocks come from a wide block range that holds the RTP-style ranges the
// tests use (the assigner's rules do not depend on the default, which is narrower).
var (
	testNodePorts = allocator.MustParseRange(policy.DefaultNodePortRange)
	testBlocks    = allocator.MustParseRange("1024-29999")
	epoch         = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
)

// svcOpt changes a test Service.
type svcOpt func(*corev1.Service)

// newSvc is a NodePort Service "default/name" created age minutes after epoch, with the given
// ports ("name/PROTO/port[/nodePort]" built by port()).
func newSvc(name string, age int, opts ...svcOpt) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Minute))},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "198.19.0.10",
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

func port(name string, proto corev1.Protocol, p, nodePort int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: name, Protocol: proto, Port: p, NodePort: nodePort})
	}
}

func typ(t corev1.ServiceType) svcOpt { return func(s *corev1.Service) { s.Spec.Type = t } }

func allocateLB(b bool) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.Type = corev1.ServiceTypeLoadBalancer
		s.Spec.AllocateLoadBalancerNodePorts = &b
	}
}

func local(hc int32) svcOpt {
	return func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.HealthCheckNodePort = hc
	}
}

func annotate(k, v string) svcOpt {
	return func(s *corev1.Service) {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k] = v
	}
}

// objects wraps Services as a manifest load, each from its own file "name.yaml".
func objects(svcs ...*corev1.Service) *manifest.Objects {
	o := &manifest.Objects{From: map[manifest.Ref]string{}}
	for _, s := range svcs {
		o.Services = append(o.Services, s)
		o.From[manifest.Ref{Kind: "Service", Namespace: s.Namespace, Name: s.Name}] = s.Name + ".yaml"
	}
	return o
}

// newAssigner returns an Assigner over nodePorts (and the default block range) with a seeded
// random source, failing the test on error.
func newAssigner(t *testing.T, nodePorts allocator.Range, dir string) *Assigner {
	t.Helper()
	a, err := New(Config{NodePortRange: nodePorts, BlockRange: testBlocks, StateDir: dir,
		Rand: rand.New(rand.NewPCG(1, 2))}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// assign runs one assignment and fails the test on a persistence error.
func assign(t *testing.T, a *Assigner, svcs ...*corev1.Service) []Problem {
	t.Helper()
	probs, err := assignWith(t, a, nil, svcs...)
	if err != nil {
		t.Fatal(err)
	}
	return probs
}

// assignWith runs one assignment of svcs with the load's file errors errs. Assign must not write
// into the Services it is given (the manifest Watcher keeps them for the next reload): it fails
// the test if it did. Then it puts what the model is given into svcs, for the test to check.
func assignWith(t *testing.T, a *Assigner, errs []manifest.FileError, svcs ...*corev1.Service) ([]Problem, error) {
	t.Helper()
	objs := objects(svcs...)
	before := make([]*corev1.Service, len(svcs))
	for i, s := range svcs {
		before[i] = s.DeepCopy()
	}
	probs, err := a.Assign(objs, errs)
	for i, s := range svcs {
		if !equality.Semantic.DeepEqual(s, before[i]) {
			t.Errorf("%s: Assign wrote into the Service it was given", s.Name)
		}
		*s = *objs.Services[i]
	}
	return probs, err
}

func nodePorts(s *corev1.Service) []int32 {
	out := make([]int32, len(s.Spec.Ports))
	for i, p := range s.Spec.Ports {
		out[i] = p.NodePort
	}
	return out
}
