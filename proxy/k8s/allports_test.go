package k8s

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// TestAllPortsSliceWithoutPorts: Kubernetes mode goes through the same model as manifest mode,
// so the EndpointSlice of an all-ports Service with no ports (KEP-2610's design), or with a port
// entry without a number, gives the Service its endpoints after the informers' transform.
func TestAllPortsSliceWithoutPorts(t *testing.T) {
	svc := service("any", nil, map[string]string{annotation.AllPortsKey: "true"})
	svc.Spec.Ports = []corev1.ServicePort{{Name: "tcp", Port: 1, Protocol: corev1.ProtocolTCP}}
	empty := slice("any", "198.18.128.11")
	empty.Ports = nil
	proto := corev1.ProtocolTCP
	unset := slice("any", "198.18.128.12")
	unset.Name, unset.Ports = "any-2", []discoveryv1.EndpointPort{{Protocol: &proto}}
	_, tr := runSource(t, fake.NewClientset(svc, empty, unset, node(testNode, "198.18.0.1")), time.Millisecond)
	if got := endpointsOf(tr, "any"); len(got) != 2 || got[0] != "198.18.128.11" || got[1] != "198.18.128.12" {
		t.Fatalf("all-ports endpoints: got %v, want [198.18.128.11 198.18.128.12]", got)
	}
}
