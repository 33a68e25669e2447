package cluster

import (
	"context"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// Address plan of these tests: ClusterIPs come from the cluster's ranges (ServiceCIDRv4/V6),
// endpoints from test/lab's pod network.
const (
	podIPv4 = "198.18.128.11"
	podIPv6 = "fd00:128::11"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	os.Exit(m.Run())
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func webService(name string) *corev1.Service {
	dual := corev1.IPFamilyPolicyRequireDualStack
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeClusterIP,
			IPFamilyPolicy: &dual,
			Selector:       map[string]string{"app": name},
			Ports:          []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

func webSlice(svc string) *discoveryv1.EndpointSlice {
	ready := true
	name, port, proto := "http", int32(8080), corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "default", Name: svc + "-v4",
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{podIPv4},
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		}},
		Ports: []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
}

// A dual-stack Service gets one ClusterIP from each configured range; an EndpointSlice written
// for it reads back unchanged through the label the proxy watches by.
func TestServiceAndEndpointSlice(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{})
	ctx := ctxFor(t)
	cs := c.Client()
	svc, err := cs.CoreV1().Services("default").Create(ctx, webService("web"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ranges := []netip.Prefix{netip.MustParsePrefix(ServiceCIDRv4), netip.MustParsePrefix(ServiceCIDRv6)}
	if len(svc.Spec.ClusterIPs) != 2 {
		t.Fatalf("ClusterIPs = %v, want one IPv4 and one IPv6", svc.Spec.ClusterIPs)
	}
	for i, ip := range svc.Spec.ClusterIPs {
		if a, err := netip.ParseAddr(ip); err != nil || !ranges[i].Contains(a) {
			t.Errorf("ClusterIPs[%d] = %s, want an address in %s", i, ip, ranges[i])
		}
	}
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Create(ctx, webSlice("web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != svc.UID || got.Spec.Ports[0].Port != 80 {
		t.Errorf("read back Service %s port %d, want %s port 80", got.UID, got.Spec.Ports[0].Port, svc.UID)
	}
	slices, err := cs.DiscoveryV1().EndpointSlices("default").List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(slices.Items) != 1 || len(slices.Items[0].Endpoints) != 1 || slices.Items[0].Endpoints[0].Addresses[0] != podIPv4 {
		t.Errorf("slices for web = %+v, want one with endpoint %s", slices.Items, podIPv4)
	}
}

// A ServiceAccount token bound to a read-only ClusterRole is who it says, may list Services,
// and may neither create them nor list Nodes.
func TestServiceAccountRBAC(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{SingleStack: true})
	ctx := ctxFor(t)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-service-reader"},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"get", "list", "watch"},
		}},
	}
	if _, err := c.Client().RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := c.ServiceAccount(t, "kube-system", "reader", role.Name)
	cs, err := kubernetes.NewForConfig(a.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	review, err := cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := review.Status.UserInfo.Username, "system:serviceaccount:kube-system:reader"; got != want {
		t.Errorf("token authenticates as %q, want %q", got, want)
	}
	if _, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("list services (granted): %v", err)
	}
	_, err = cs.CoreV1().Services("default").Create(ctx, webService("denied"), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("create service (not granted): err = %v, want Forbidden", err)
	}
	_, err = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("list nodes (not granted): err = %v, want Forbidden", err)
	}
}

// Objects live in etcd: an API server stopped and started again serves the same objects, and
// the admin credentials keep working.
func TestStopRestartKeepsObjects(t *testing.T) {
	t.Parallel()
	c := Start(t, Options{})
	ctx := ctxFor(t)
	svc, err := c.Client().CoreV1().Services("default").Create(ctx, webService("kept"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Stop()
	if c.Running() {
		t.Fatal("Running() after Stop = true")
	}
	if _, err := c.Client().CoreV1().Services("default").Get(ctx, "kept", metav1.GetOptions{}); err == nil {
		t.Fatal("Get succeeded while the API server was stopped")
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := c.Client().CoreV1().Services("default").Get(ctx, "kept", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.UID != svc.UID || got.Spec.ClusterIP != svc.Spec.ClusterIP {
		t.Errorf("after restart: uid %s clusterIP %s, want %s %s", got.UID, got.Spec.ClusterIP, svc.UID, svc.Spec.ClusterIP)
	}
}

// A server that cannot start fails Start at once (not at the timeout) with its own words.
func TestAPIServerStartFailureShowsLog(t *testing.T) {
	Skip(t)
	ctx := ctxFor(t)
	paths, err := Binaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Binaries: paths, dir: t.TempDir(), relays: map[string]*relay{}}
	t.Cleanup(func() {
		_ = c.apiserver.stop(stopGrace)
		_ = c.etcd.stop(stopGrace)
	})
	err = c.start(ctx, Options{APIServerArgs: []string{"--no-such-flag"}})
	if err == nil {
		t.Fatal("start with an unknown flag succeeded")
	}
	for _, want := range []string{"kube-apiserver exited before it was ready", "unknown flag: --no-such-flag", "kube-apiserver.log"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q\nwant it to contain %q", err, want)
		}
	}
	if c.apiserver.running() || !c.etcd.running() {
		t.Errorf("after a failed start: apiserver running %v, etcd running %v; want false, true (etcd stops at cleanup)", c.apiserver.running(), c.etcd.running())
	}
}
