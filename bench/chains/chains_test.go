package chains

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// TestTransform: the per-endpoint-chain layout built from nftproxy's ruleset has one endpoint
// chain per endpoint of every Service port, an external chain per node-port port, no shared
// endpoint map or shared chain left, and is a valid ruleset (the Fake refuses a goto to a
// missing chain). A partial diff between two versions applies on top of it.
func TestTransform(t *testing.T) {
	w := workload.Generate(workload.DefaultSpec(200, 3, 1))
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.16.0/20")}, NodeName: w.Node.Name})
	if err != nil {
		t.Fatal(err)
	}
	local := &model.Service{Key: model.ServiceKey{Namespace: "x", Name: "local"}, Ports: []model.ServicePort{{
		Name: model.PortName{Service: model.ServiceKey{Namespace: "x", Name: "local"}, Port: "http", Protocol: model.TCP},
		Port: 80, PortEnd: 80, TargetPort: 8080, NodePort: 32000, ExternalTrafficLocal: true,
		ClusterIPs: []netip.Addr{netip.MustParseAddr("198.19.200.1")},
		Endpoints: []model.Endpoint{model.Endpoint{Addr: netip.MustParseAddr("198.18.200.1"), Port: 8080, Ready: true}.At(w.Node.Name, ""),
			model.Endpoint{Addr: netip.MustParseAddr("198.18.200.2"), Port: 8080, Ready: true}.At("other", "")},
	}}}
	services := append(append([]*model.Service(nil), w.Services...), local)
	out := Transform(b.Ruleset(w.Node, services), 0x4000)

	var ports, nodePorts int
	for _, s := range w.Services {
		for _, sp := range s.Ports {
			ports++
			if sp.NodePort != 0 && !sp.AllPorts && !sp.KeepsPort() {
				nodePorts++
			}
		}
	}
	var epChains, extChains int
	seen := map[string]bool{}
	for _, c := range out.Chains {
		if seen[c.Name] {
			t.Errorf("chain %s twice", c.Name)
		}
		seen[c.Name] = true
		switch {
		case sharedChain.MatchString(c.Name):
			t.Errorf("shared chain %s left", c.Name)
		case strings.HasPrefix(c.Name, "ep-"):
			epChains++
		case strings.HasPrefix(c.Name, "ext-x/local/"):
		case strings.HasPrefix(c.Name, "ext-"):
			extChains++
		}
	}
	// local: 2 cluster endpoints, 1 local (its own chain "local-…").
	if want := 3*ports + 3; epChains != want {
		t.Errorf("%d endpoint chains, want %d (3 per port, 3 for the eTP Local port)", epChains, want)
	}
	if extChains != nodePorts {
		t.Errorf("%d external chains, want %d (one per node-port port)", extChains, nodePorts)
	}
	for _, s := range out.Sets {
		if s.NumgenKey > 0 {
			t.Errorf("endpoint map %s left", s.Name)
		}
	}
	f := nft.NewFake()
	if _, err := f.Apply(context.Background(), Full(out)); err != nil {
		t.Fatalf("the per-endpoint-chain ruleset does not apply: %v", err)
	}
	w.ChangeEndpoints(5)
	next := Transform(b.Ruleset(w.Node, w.Services), 0x4000) // and the eTP Local Service removed
	if _, err := f.Apply(context.Background(), Diff(out, next)); err != nil {
		t.Fatalf("a partial diff does not apply: %v", err)
	}
}
