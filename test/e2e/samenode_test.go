package e2e

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// TestPreferSameNode: the running daemon (node-a) sends ClusterIP traffic of a
// trafficDistribution PreferSameNode Service only to the endpoint hinted for its node — by the
// EndpointSlice's hints.forNodes as the controller writes them, and by the endpoints' own node
// names when no hints are written — and to every endpoint when one ready endpoint lacks node
// hints (the node mode falls back: the node has no zone, so to all).
func TestPreferSameNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 4, Ports: []lab.PortSpec{lab.Port(8080)}})
	sameNode := func(s *corev1.Service) {
		s.Spec.TrafficDistribution = ptrTo(corev1.ServiceTrafficDistributionPreferSameNode)
	}
	hinted := func(pod int, node string) fixture.Endpoint {
		return fixture.Endpoint{Pod: pod, Node: node, NodeHints: []string{node}}
	}
	written := policyWeb("same-node", 35, hinted(1, fixture.NodeName), hinted(2, otherNodeName), hinted(3, otherNodeName))
	unwritten := policyWeb("same-node-unhinted", 36, append(local(1), remote(2, 3)...)...)
	partial := policyWeb("same-node-partial", 37, hinted(1, fixture.NodeName), hinted(2, otherNodeName),
		fixture.Endpoint{Pod: 3, Node: otherNodeName})
	services := []fixture.Service{written, unwritten, partial}
	for i := range services {
		services[i].Edit = sameNode
		e.write(services[i])
	}
	e.start(services...)
	pod4 := e.lab.Pod(4)
	for _, c := range []struct {
		name string
		ip   int
		want []string
	}{
		{"node hints: this node's endpoint only", 35, podNames(1)},
		{"no hints written: this node's endpoint only", 36, podNames(1)},
		{"a ready endpoint without node hints: all", 37, podNames(1, 2, 3)},
	} {
		t.Run(c.name, func(t *testing.T) {
			const n = 36
			got := pod4.Spread(e.ctx, "tcp", hostPort(lab.ClusterIPv4(c.ip), 80), n)
			total := 0
			for pod, k := range got.Pods {
				total += k
				if !slices.Contains(c.want, pod) {
					t.Errorf("%s answered: got %s, want only %v", pod, got, c.want)
				}
			}
			if total != n {
				t.Errorf("%d connections: got %s, want %d replies", n, got, n)
			}
			if len(got.Pods) != len(c.want) {
				// 36 uniform picks miss one of three endpoints with probability under 2·10⁻⁶.
				t.Errorf("got %s, want replies from each of %v", got, c.want)
			}
		})
	}
}
