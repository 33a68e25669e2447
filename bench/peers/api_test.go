package peers

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestCreateServiceStoredByAnEarlierAttempt: the API server stored the Service but the create
// came back as "provided IP is already allocated" (a retry after a timeout, as seen while
// populating 30k Services): the Service exists with its ClusterIP, so it counts as created.
func TestCreateServiceStoredByAnEarlierAttempt(t *testing.T) {
	cs := fake.NewSimpleClientset()
	cs.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		svc := a.(k8stesting.CreateAction).GetObject().(*corev1.Service)
		if err := cs.Tracker().Add(svc.DeepCopy()); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, svc.Name, field.ErrorList{
			field.Invalid(field.NewPath("spec", "clusterIPs"), []string{svc.Spec.ClusterIP}, "failed to allocate IP "+svc.Spec.ClusterIP+": provided IP is already allocated")})
	})
	s := ProbeService("p", netip.MustParseAddr("198.19.19.38"), netip.MustParseAddr("198.18.15.1"))
	if err := CreateService(context.Background(), cs, s); err != nil {
		t.Fatalf("CreateService: %v", err)
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ProbeNamespace).Get(context.Background(), "p-ipv4", metav1.GetOptions{}); err != nil {
		t.Errorf("the EndpointSlice was not created: %v", err)
	}
	// Another Service holding the address is a real error.
	cs2 := fake.NewSimpleClientset()
	cs2.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "p", nil)
	})
	if err := CreateService(context.Background(), cs2, s); err == nil {
		t.Error("CreateService succeeded when the Service was not stored")
	}
}

// TestCreateServiceReleasesALeakedIP: the create is refused because an IPAddress holds the
// ClusterIP for a Service that does not exist (the allocator kept the address of a create that
// timed out and was never stored): the leaked address is released and the create tried again.
// So is an address held for a Service that exists with another address. An address an existing
// Service has stays an error that names it.
func TestCreateServiceReleasesALeakedIP(t *testing.T) {
	const ip = "198.19.35.17"
	refused := func(cs *fake.Clientset) {
		cs.PrependReactor("create", "services", func(a k8stesting.Action) (bool, runtime.Object, error) {
			// The tracker, not the clientset: a reactor runs under the clientset's lock.
			if _, err := cs.Tracker().Get(networkingv1.SchemeGroupVersion.WithResource("ipaddresses"), "", ip); err != nil {
				return false, nil, nil // free: the default reactor stores the Service
			}
			return true, nil, apierrors.NewInvalid(schema.GroupKind{Kind: "Service"}, "p", field.ErrorList{
				field.Invalid(field.NewPath("spec", "clusterIPs"), []string{ip}, "failed to allocate IP "+ip+": provided IP is already allocated")})
		})
	}
	held := func(ns, name string) *networkingv1.IPAddress {
		return &networkingv1.IPAddress{ObjectMeta: metav1.ObjectMeta{Name: ip},
			Spec: networkingv1.IPAddressSpec{ParentRef: &networkingv1.ParentReference{Resource: "services", Namespace: ns, Name: name}}}
	}
	s := ProbeService("p", netip.MustParseAddr(ip), netip.MustParseAddr("198.18.15.1"))

	cs := fake.NewSimpleClientset(held(ProbeNamespace, "p"))
	refused(cs)
	if err := CreateService(context.Background(), cs, s); err != nil {
		t.Fatalf("CreateService with a leaked address: %v", err)
	}
	if _, err := cs.CoreV1().Services(ProbeNamespace).Get(context.Background(), "p", metav1.GetOptions{}); err != nil {
		t.Errorf("the Service was not created after the address was released: %v", err)
	}

	// The parent exists but has another address: the IPAddress is stale, released too.
	elsewhere := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "first"},
		Spec: corev1.ServiceSpec{ClusterIP: "198.19.0.1", ClusterIPs: []string{"198.19.0.1"}}}
	cs3 := fake.NewSimpleClientset(held("default", "first"), elsewhere)
	refused(cs3)
	if err := CreateService(context.Background(), cs3, s); err != nil {
		t.Fatalf("CreateService with an address held for a Service that has another: %v", err)
	}

	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "other"},
		Spec: corev1.ServiceSpec{ClusterIP: ip, ClusterIPs: []string{ip}}}
	cs2 := fake.NewSimpleClientset(held("default", "other"), other)
	refused(cs2)
	if err := CreateService(context.Background(), cs2, s); err == nil {
		t.Error("CreateService succeeded while another Service holds the address")
	} else if !strings.Contains(err.Error(), "default/other") {
		t.Errorf("error %q does not name the Service holding the address", err)
	}
}
