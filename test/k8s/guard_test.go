package k8s

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// waitEvent waits (bounded) for a Warning Event on Service name and returns its reason and note.
func (e *env) waitEvent(name string) (reason, note string) {
	e.t.Helper()
	e.waitUntil("a Warning Event on Service "+name, func() (bool, string) {
		for _, ev := range e.eventsOn(name) {
			if ev.Type == "Warning" {
				reason, note = ev.Reason, ev.Note
				return true, ""
			}
		}
		return false, "none"
	})
	return reason, note
}

// eventsOn lists the Events nftproxy reported on Service name. The API server reports on
// Services too: its ClusterIP repair controller may warn about a Service created while it
// starts, which made these tests flaky.
func (e *env) eventsOn(name string) []eventsv1.Event {
	e.t.Helper()
	list, err := e.cs.EventsV1().Events(testNS).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Regarding.Kind == "Service" && ev.Regarding.Name == name && ev.ReportingController == "nftproxy" {
			out = append(out, ev)
		}
	}
	return out
}

// TestNodeIsGuardedInKubernetesMode with the DaemonSet's own
// settings: a user-written node-port block over the kubelet's port, which Kubernetes mode used to
// program unchecked, and an all-ports LoadBalancer whose ingress IP (written in the status, as a
// bare-metal load balancer does) is the node's address. Both are rejected with an Event and left
// out of the ruleset; a plain Service next to them is programmed.
func TestNodeIsGuardedInKubernetesMode(t *testing.T) {
	e := newEnv(t, nil)
	block := fixture.Service{Name: "kubelet-block", Namespace: testNS, Type: corev1.ServiceTypeNodePort,
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(60)}, Ports: []fixture.Port{{Name: "k", Protocol: corev1.ProtocolTCP, Port: 10240}},
		Annotations: map[string]string{annotation.PortRangesKey: "k=10240-10260", annotation.NodePortRangesKey: "k=10240-10260"}}
	takeover := fixture.Service{Name: "takeover", Namespace: testNS, Type: corev1.ServiceTypeLoadBalancer,
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(61)}, Ports: []fixture.Port{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 1}},
		Annotations: map[string]string{annotation.AllPortsKey: "true"}}
	e.createService(block)
	e.createService(takeover)
	got, err := e.cs.CoreV1().Services(testNS).Get(e.ctx, takeover.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: lab.NodeIPv4}}
	if _, err := e.cs.CoreV1().Services(testNS).UpdateStatus(e.ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status of %s: %v", takeover.Name, err)
	}
	plain := httpService("plain", 62, 1)
	e.createService(plain)
	e.waitProgrammed(plain)

	for name, want := range map[string]string{block.Name: model.ReasonReservedPort, takeover.Name: model.ReasonNodeAddressRange} {
		reason, note := e.waitEvent(name)
		if reason != want {
			t.Errorf("Event on %s: reason %q (%s); want %s", name, reason, note, want)
		}
	}
	// The takeover's Event may come from its creation, before the status named the node's
	// address; wait until the daemon has seen the status (its rejection) before reading the rules.
	e.waitFor("the takeover Service rejected", func(rs string) bool {
		return !strings.Contains(rs, `"`+testNS+"/"+takeover.Name+"/")
	})
	rs := e.ruleset()
	for _, name := range []string{block.Name, takeover.Name} {
		if strings.Contains(rs, `"`+testNS+"/"+name+"/") {
			t.Errorf("rejected Service %s is programmed; ruleset:\n%s", name, rs)
		}
	}
	if strings.Contains(rs, "10240-10260") {
		t.Errorf("the block over the kubelet's port is programmed; ruleset:\n%s", rs)
	}
}
