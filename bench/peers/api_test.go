package peers

import (
	"context"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
