package model

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// ep builds an endpoint 198.18.128.<n> on node, in zone, with conditions from flags: r ready,
// s serving, t terminating; hints are its forZones hints.
func topoEP(n int, flags, node, zone string, hints ...string) Endpoint {
	return Endpoint{
		Addr:  netip.MustParseAddr(fmt.Sprintf("198.18.128.%d", n)),
		Port:  8080,
		Ready: strings.Contains(flags, "r"), Serving: strings.Contains(flags, "s"), Terminating: strings.Contains(flags, "t"),
	}.At(node, zone, hints...)
}

func epNums(eps []Endpoint) string {
	var out []string
	for _, ep := range eps {
		out = append(out, fmt.Sprint(ep.Addr.As4()[3]))
	}
	if eps == nil {
		return "nil"
	}
	return "[" + strings.Join(out, " ") + "]"
}

func TestCategorizeEndpoints(t *testing.T) {
	clusterIP := ServicePort{}
	nodePort := ServicePort{NodePort: 30080}
	etpLocal := ServicePort{NodePort: 30080, ExternalTrafficLocal: true}
	itpLocal := ServicePort{InternalTrafficLocal: true}
	preferClose := ServicePort{PreferClose: true}
	cases := []struct {
		name           string
		port           ServicePort
		eps            []Endpoint
		zone           string
		cluster, local string
		hasAny         bool
	}{
		{"ready endpoints only", clusterIP, []Endpoint{topoEP(1, "rs", "a", ""), topoEP(2, "st", "a", ""), topoEP(3, "", "a", "")}, "", "[1]", "nil", true},
		{"no ready: serving terminating ones", clusterIP, []Endpoint{topoEP(2, "st", "b", ""), topoEP(3, "t", "a", ""), topoEP(4, "", "a", "")}, "", "[2]", "nil", true},
		{"nothing usable", clusterIP, []Endpoint{topoEP(3, "t", "a", ""), topoEP(4, "", "a", "")}, "", "[]", "nil", false},
		{"node port without Local policy: no local list", nodePort, []Endpoint{topoEP(1, "rs", "a", ""), topoEP(2, "rs", "b", "")}, "", "[1 2]", "nil", true},
		{"eTP Local: cluster list kept for short-circuits", etpLocal, []Endpoint{topoEP(1, "rs", "a", ""), topoEP(2, "rs", "b", "")}, "", "[1 2]", "[1]", true},
		{"eTP Local, no local endpoint", etpLocal, []Endpoint{topoEP(2, "rs", "b", "")}, "", "[2]", "nil", true},
		{"eTP Local: local terminating only when no local ready", etpLocal, []Endpoint{topoEP(1, "st", "a", ""), topoEP(2, "rs", "b", "")}, "", "[2]", "[1]", true},
		{"eTP Local: local ready wins over local terminating", etpLocal, []Endpoint{topoEP(1, "st", "a", ""), topoEP(3, "rs", "a", "")}, "", "[3]", "[3]", true},
		{"eTP Local without external addresses is Cluster", ServicePort{ExternalTrafficLocal: true}, []Endpoint{topoEP(1, "rs", "a", ""), topoEP(2, "rs", "b", "")}, "", "[1 2]", "nil", true},
		{"iTP Local: no cluster list", itpLocal, []Endpoint{topoEP(1, "rs", "a", ""), topoEP(2, "rs", "b", "")}, "", "nil", "[1]", true},
		{"iTP Local, remote only: none local but some exist", itpLocal, []Endpoint{topoEP(2, "rs", "b", "")}, "", "nil", "nil", true},
		{"iTP Local, remote serving terminating counts as existing", itpLocal, []Endpoint{topoEP(2, "st", "b", "")}, "", "nil", "nil", true},
		{"hints: same zone", clusterIP, []Endpoint{topoEP(1, "rs", "b", "z1", "z1"), topoEP(2, "rs", "b", "z2", "z2"), topoEP(3, "rs", "b", "z1", "z1")}, "z1", "[1 3]", "nil", true},
		{"hints: one ready endpoint without hints: all", clusterIP, []Endpoint{topoEP(1, "rs", "b", "z1", "z1"), topoEP(2, "rs", "b", "z2")}, "z1", "[1 2]", "nil", true},
		{"hints: not-ready endpoint without hints does not count", clusterIP, []Endpoint{topoEP(1, "rs", "b", "z1", "z1"), topoEP(2, "rs", "b", "z2", "z2"), topoEP(3, "", "b", "z2")}, "z1", "[1]", "nil", true},
		{"hints: none for this zone: all", clusterIP, []Endpoint{topoEP(1, "rs", "b", "z2", "z2"), topoEP(2, "rs", "b", "z3", "z3")}, "z1", "[1 2]", "nil", true},
		{"hints: node without zone: all", clusterIP, []Endpoint{topoEP(1, "rs", "b", "z1", "z1"), topoEP(2, "rs", "b", "z2", "z2")}, "", "[1 2]", "nil", true},
		{"hints: an endpoint hinted for two zones", clusterIP, []Endpoint{topoEP(1, "rs", "b", "z2", "z1", "z2"), topoEP(2, "rs", "b", "z2", "z2")}, "z1", "[1]", "nil", true},
		{"PreferClose without hints: own zone", preferClose, []Endpoint{topoEP(1, "rs", "b", "z1"), topoEP(2, "rs", "b", "z2")}, "z1", "[1]", "nil", true},
		{"PreferClose, an endpoint without zone: all", preferClose, []Endpoint{topoEP(1, "rs", "b", "z1"), topoEP(2, "rs", "b", "")}, "z1", "[1 2]", "nil", true},
		{"no PreferClose, no hints: zones ignored", clusterIP, []Endpoint{topoEP(1, "rs", "b", "z1"), topoEP(2, "rs", "b", "z2")}, "z1", "[1 2]", "nil", true},
		{"topology never narrows Local", ServicePort{NodePort: 1, ExternalTrafficLocal: true, PreferClose: true}, []Endpoint{topoEP(1, "rs", "a", "z2"), topoEP(2, "rs", "b", "z1")}, "z1", "[2]", "[1]", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := CategorizeEndpoints(&c.port, c.eps, "a", c.zone)
			if epNums(got.Cluster) != c.cluster || epNums(got.Local) != c.local || got.HasAny != c.hasAny {
				t.Errorf("got cluster %s local %s hasAny %v, want cluster %s local %s hasAny %v",
					epNums(got.Cluster), epNums(got.Local), got.HasAny, c.cluster, c.local, c.hasAny)
			}
		})
	}
	if got := CategorizeEndpoints(&etpLocal, []Endpoint{topoEP(1, "rs", "", "")}, "", ""); got.Local != nil {
		t.Errorf("without a node name no endpoint is local: got %s", epNums(got.Local))
	}
}

// TestEndpointPlacementReplaced: At replaces an endpoint's placement, so placing an endpoint
// nowhere clears the one it had.
func TestEndpointPlacementReplaced(t *testing.T) {
	placed := Endpoint{Addr: netip.MustParseAddr("198.18.128.1"), Port: 8080}.At("n1", "z1", "z1").ForNodes("n1")
	nowhere := placed.At("", "")
	if got := nowhere.Where(); got != (Topology{}) {
		t.Errorf("At(\"\", \"\") of an endpoint on n1: placement %+v; want none", got)
	}
}
