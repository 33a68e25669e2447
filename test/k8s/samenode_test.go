package k8s

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// TestPreferSameNodeFromTheAPI: trafficDistribution PreferSameNode Services whose
// EndpointSlices carry hints.forNodes as the EndpointSlice controller writes them (each ready
// endpoint hinted for its own node), stored by the real API server and read through the
// daemon's informers: traffic reaches only this node's endpoint; with one endpoint's hints
// missing (a slice the controller has not reconciled yet) it reaches every endpoint.
func TestPreferSameNodeFromTheAPI(t *testing.T) {
	e := newLabEnv(t, nil, lab.Options{Pods: 3})
	hinted := func(pod int, node string) fixture.Endpoint {
		return fixture.Endpoint{Pod: pod, Node: node, NodeHints: []string{node}}
	}
	const elsewhere = "node-b"
	written := httpService("same-node", 23)
	written.Endpoints = []fixture.Endpoint{hinted(1, fixture.NodeName), hinted(2, elsewhere), hinted(3, elsewhere)}
	partial := httpService("same-node-partial", 24)
	partial.Endpoints = []fixture.Endpoint{hinted(1, fixture.NodeName), hinted(2, elsewhere), {Pod: 3, Node: elsewhere}}
	for _, s := range []*fixture.Service{&written, &partial} {
		s.Edit = func(svc *corev1.Service) {
			td := corev1.ServiceTrafficDistributionPreferSameNode
			svc.Spec.TrafficDistribution = &td
		}
		if got := e.createService(*s).Spec.TrafficDistribution; got == nil || *got != corev1.ServiceTrafficDistributionPreferSameNode {
			t.Fatalf("%s: the API server stored trafficDistribution %v, want PreferSameNode", s.Name, got)
		}
	}
	e.waitProgrammed(written)
	e.waitProgrammed(partial)
	for _, c := range []struct {
		s    fixture.Service
		want int // how many pods answer: pods 1..want
	}{{written, 1}, {partial, 3}} {
		const n = 36
		got := e.lab.Client(1).Spread(e.ctx, "tcp", vip(c.s), n)
		total := 0
		for _, k := range got.Pods {
			total += k
		}
		if total != n || len(got.Pods) != c.want {
			// 36 uniform picks miss one of three endpoints with probability under 2·10⁻⁶.
			t.Errorf("%s: %d connections got %s, want replies from pods 1..%d only, each of them", c.s.Name, n, got, c.want)
		}
		for pod := c.want + 1; pod <= 3; pod++ {
			if got.Pods[e.lab.Pod(pod).Name] > 0 {
				t.Errorf("%s: %s answered: got %s", c.s.Name, e.lab.Pod(pod).Name, got)
			}
		}
	}
}
