package workload

import (
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

func TestGenerateIsDeterministic(t *testing.T) {
	a, b := Generate(DefaultSpec(2000, 10, 7)), Generate(DefaultSpec(2000, 10, 7))
	if !reflect.DeepEqual(a.Services, b.Services) {
		t.Fatal("two workloads from the same spec differ")
	}
	if !reflect.DeepEqual(a.ChangeEndpoints(5), b.ChangeEndpoints(5)) {
		t.Fatal("the same churn on the same workload differs")
	}
	if c := Generate(DefaultSpec(2000, 10, 8)); reflect.DeepEqual(a.Services[:100], c.Services[:100]) {
		t.Fatal("another seed gave the same Services")
	}
}

func TestMix(t *testing.T) {
	w := Generate(DefaultSpec(10000, 10, 1))
	var ranges, all, nodePorts int
	for _, s := range w.Services {
		for _, p := range s.Ports {
			switch {
			case p.AllPorts:
				all++
			case p.IsRange():
				ranges++
			case p.NodePort != 0:
				nodePorts++
			}
			if len(p.Endpoints) != 10 {
				t.Fatalf("%s: %d endpoints, want 10", p.Name, len(p.Endpoints))
			}
		}
	}
	// Expected: 50 all-ports, 100 ranges, ~3000 (+10% second ports) NodePort ports.
	if all < 20 || all > 100 || ranges < 50 || ranges > 170 || nodePorts < 2700 || nodePorts > 3700 {
		t.Fatalf("mix: %d all-ports, %d ranges, %d node ports; want about 50, 100, 3300", all, ranges, nodePorts)
	}
}

func TestChangeEndpointsKeepsOldValues(t *testing.T) {
	w := Generate(DefaultSpec(50, 10, 3))
	before := append([]*model.Service(nil), w.Services...)
	snapshot := Generate(DefaultSpec(50, 10, 3)).Services
	changed := w.ChangeEndpoints(3)
	if len(changed) != 3 {
		t.Fatalf("changed %d Services, want 3", len(changed))
	}
	if !reflect.DeepEqual(before, snapshot) {
		t.Fatal("ChangeEndpoints modified Services handed out before")
	}
}

// TestBuilds checks that the builder accepts every kind of generated Service and that the
// ruleset's size matches the workload.
func TestBuilds(t *testing.T) {
	w := Generate(DefaultSpec(1000, 10, 1))
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
	if err != nil {
		t.Fatal(err)
	}
	rs := b.Ruleset(w.Node, w.Services)
	if n := len(rs.Elements[ruleset.MapServiceIPs]) + len(rs.Elements[ruleset.MapServiceRanges]) + len(rs.Elements[ruleset.MapServiceAllPorts]); n < 1000 {
		t.Fatalf("%d dispatch elements for 1000 Services", n)
	}
	if len(rs.Elements[ruleset.MapNodePorts]) < 250 {
		t.Fatalf("%d node-port elements, want about 330", len(rs.Elements[ruleset.MapNodePorts]))
	}
}

// TestFixtureClusterIPs: every Service of a large workload asks the API server for its own
// fixed ClusterIP, none of them the default/kubernetes Service's: a Service left to a dynamic
// address can be given one a later Service needs (it stopped a 30k populate, twice).
func TestFixtureClusterIPs(t *testing.T) {
	w := Generate(DefaultSpec(30000, 1, 1))
	seen := map[netip.Addr]string{}
	for _, s := range w.Services {
		f := Fixture(s, time.Time{})
		if len(f.ClusterIPs) != 1 {
			t.Fatalf("Service %s asks for ClusterIPs %v, want one fixed address", s.Key, f.ClusterIPs)
		}
		ip := f.ClusterIPs[0]
		if ip == reservedClusterIP {
			t.Fatalf("Service %s asks for %s, the default/kubernetes Service's", s.Key, ip)
		}
		if other, dup := seen[ip]; dup {
			t.Fatalf("Services %s and %s both ask for %s", other, s.Key, ip)
		}
		seen[ip] = s.Key.String()
	}
}
