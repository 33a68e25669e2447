package model

import "testing"

// TestCategorizeEndpointsNodeHints: node hints (hints.forNodes, written by the EndpointSlice
// controller for trafficDistribution PreferSameNode) and their fallback to zone hints. The
// cases marked "upstream" restate those of kube-proxy v1.34.4's pkg/proxy/topology_test.go
// (TestCategorizeEndpoints, the PreferSameNode ones, with the gate on as in 1.35); the others
// cover what that table leaves out: the stand-in for unwritten hints, Local policies and
// terminating endpoints combined with node hints.
func TestCategorizeEndpointsNodeHints(t *testing.T) {
	clusterIP := ServicePort{}
	sameNode := ServicePort{PreferClose: true, PreferSameNode: true}
	etpLocal := ServicePort{NodePort: 30080, ExternalTrafficLocal: true}
	itpLocal := ServicePort{InternalTrafficLocal: true}
	// hinted is endpoint n, ready, on node (and hinted for it), in zone (and hinted for it).
	hinted := func(n int, node, zone string) Endpoint {
		return topoEP(n, "rs", node, zone, zone).ForNodes(node)
	}
	cases := []struct {
		name           string
		port           ServicePort
		eps            []Endpoint
		node, zone     string
		cluster, local string
	}{
		{"upstream: PreferSameNode available", clusterIP,
			[]Endpoint{hinted(3, "node-1", "zone-a"), hinted(4, "node-2", "zone-b"), hinted(5, "node-3", "zone-c"), hinted(6, "node-4", "zone-a")},
			"node-1", "zone-a", "[3]", "nil"},
		{"upstream: PreferSameNode ignored if some endpoints unhinted", clusterIP,
			[]Endpoint{hinted(3, "node-1", "zone-a"), topoEP(4, "rs", "", ""), hinted(5, "node-3", "zone-c"), hinted(6, "node-4", "zone-a")},
			"node-1", "zone-a", "[3 4 5 6]", "nil"},
		{"upstream: PreferSameNode falls back to PreferSameZone if no endpoint for node", clusterIP,
			[]Endpoint{hinted(3, "node-1", "zone-a"), hinted(4, "node-2", "zone-b"), hinted(5, "node-3", "zone-c"), hinted(6, "node-4", "zone-a")},
			"node-0", "zone-a", "[3 6]", "nil"},
		{"node hints missing on one endpoint, zone hints on all: zone", clusterIP,
			[]Endpoint{hinted(1, "node-1", "zone-a"), topoEP(2, "rs", "node-2", "zone-a", "zone-a"), hinted(3, "node-3", "zone-b")},
			"node-1", "zone-a", "[1 2]", "nil"},
		{"an endpoint hinted for two nodes", clusterIP,
			[]Endpoint{topoEP(1, "rs", "node-2", "").ForNodes("node-1", "node-2"), hinted(2, "node-2", ""), hinted(3, "node-1", "")},
			"node-1", "", "[1 3]", "nil"},
		{"not-ready endpoint without node hints does not count", clusterIP,
			[]Endpoint{hinted(1, "node-1", ""), hinted(2, "node-2", ""), topoEP(3, "", "node-3", "")},
			"node-1", "", "[1]", "nil"},
		{"only a not-ready endpoint for this node: all ready", clusterIP,
			[]Endpoint{topoEP(1, "", "node-1", "").ForNodes("node-1"), hinted(2, "node-2", ""), hinted(3, "node-3", "")},
			"node-1", "", "[2 3]", "nil"},
		{"no ready endpoint: terminating ones, hints ignored", clusterIP,
			[]Endpoint{topoEP(1, "st", "node-1", "").ForNodes("node-1"), topoEP(2, "st", "node-2", "").ForNodes("node-2")},
			"node-1", "", "[1 2]", "nil"},
		{"PreferSameNode without hints: own node", sameNode,
			[]Endpoint{topoEP(1, "rs", "node-1", "zone-a"), topoEP(2, "rs", "node-2", "zone-a"), topoEP(3, "rs", "node-1", "zone-a")},
			"node-1", "zone-a", "[1 3]", "nil"},
		{"PreferSameNode without hints, none on this node: own zone", sameNode,
			[]Endpoint{topoEP(1, "rs", "node-2", "zone-a"), topoEP(2, "rs", "node-3", "zone-b")},
			"node-1", "zone-a", "[1]", "nil"},
		{"PreferSameNode, an endpoint without node or zone: all", sameNode,
			[]Endpoint{topoEP(1, "rs", "node-1", "zone-a"), topoEP(2, "rs", "", "")},
			"node-1", "zone-a", "[1 2]", "nil"},
		{"PreferSameNode, node hints written on one endpoint only: no node mode", sameNode,
			[]Endpoint{topoEP(1, "rs", "node-1", "").ForNodes("node-1"), topoEP(2, "rs", "node-2", ""), topoEP(3, "rs", "node-1", "")},
			"node-1", "", "[1 2 3]", "nil"},
		{"PreferSameNode, node hints only on a not-ready endpoint: stand-in", sameNode,
			[]Endpoint{topoEP(1, "", "node-2", "").ForNodes("node-2"), topoEP(2, "rs", "node-2", ""), topoEP(3, "rs", "node-1", "")},
			"node-1", "", "[3]", "nil"},
		{"PreferSameNode: written hints win over the endpoint's node", sameNode,
			[]Endpoint{topoEP(1, "rs", "node-1", "").ForNodes("node-2"), topoEP(2, "rs", "node-2", "").ForNodes("node-1")},
			"node-1", "", "[2]", "nil"},
		{"no PreferSameNode, no node hints: nodes ignored", ServicePort{PreferClose: true},
			[]Endpoint{topoEP(1, "rs", "node-1", "zone-a"), topoEP(2, "rs", "node-2", "zone-a")},
			"node-1", "zone-a", "[1 2]", "nil"},
		{"eTP Local: node hints narrow Cluster, never Local", etpLocal,
			[]Endpoint{hinted(1, "node-1", ""), topoEP(2, "rs", "node-1", "").ForNodes("node-2"), hinted(3, "node-2", "")},
			"node-1", "", "[1]", "[1 2]"},
		{"eTP Local: local terminating, remote ready hinted elsewhere", etpLocal,
			[]Endpoint{topoEP(1, "st", "node-1", "").ForNodes("node-1"), hinted(2, "node-2", "")},
			"node-1", "", "[2]", "[1]"},
		{"iTP Local: no cluster list whatever the hints", itpLocal,
			[]Endpoint{hinted(1, "node-2", ""), topoEP(2, "rs", "node-1", "").ForNodes("node-2")},
			"node-1", "", "nil", "[2]"},
		{"daemon without a node name: no node mode", clusterIP,
			[]Endpoint{hinted(1, "node-1", "zone-a"), hinted(2, "node-2", "zone-b")},
			"", "zone-a", "[1]", "nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := CategorizeEndpoints(&c.port, c.eps, c.node, c.zone)
			if epNums(got.Cluster) != c.cluster || epNums(got.Local) != c.local {
				t.Errorf("got cluster %s local %s, want cluster %s local %s",
					epNums(got.Cluster), epNums(got.Local), c.cluster, c.local)
			}
		})
	}
}
