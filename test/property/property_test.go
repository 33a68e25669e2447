package property

import (
	"reflect"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
)

// TestGeneratedServicesPure is the property over many seeds without root: every generated
// API-valid Service, through the tracker, the builders and the renderer (what `nftproxy render`
// does) and a full sync into nft.Fake, is programmed or rejected as its shape requires, with a
// documented reason; every name and comment fits the kernel's limits; a port with a ready local
// endpoint reaches it; nothing takes a node address's reserved ports; the sync never fails as a
// whole; the fake ends equal to the rendered ruleset.
func TestGeneratedServicesPure(t *testing.T) {
	p := currentProfile()
	for _, seed := range seeds(t, p.pureSeeds) {
		b := Generate(options(seed, p.pureServices, p))
		res := RunPure(b, nodeIPs)
		report(t, "TestGeneratedServicesPure", b, res.Failures, func(single *Batch) []Failure { return RunPure(single, nodeIPs).Failures })
	}
}

// TestGeneratorIsDeterministic: a seed is a reproduction. The same seed gives the same objects.
func TestGeneratorIsDeterministic(t *testing.T) {
	p := currentProfile()
	a := Generate(options(7, 100, p))
	b := Generate(options(7, 100, p))
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two batches from seed 7 differ: the generator reads something besides its seed")
	}
	c := Generate(options(8, 100, p))
	if reflect.DeepEqual(a.Services[0].Service, c.Services[0].Service) {
		t.Fatal("seeds 7 and 8 start with the same Service: the seed is not used")
	}
}

// TestGeneratorCoversEveryShape: over 20 seeds with nothing excluded, every shape
// appears, and the API's maxima are reached (63-character namespace and name, 15-character port
// name, 100 ports, ClientIP timeout 86400, a range ending at 65535).
func TestGeneratorCoversEveryShape(t *testing.T) {
	seen := map[Shape]int{}
	var maxNS, maxName, maxPort, maxPorts int
	var maxTimeout int32
	for seed := uint64(1); seed <= 20; seed++ {
		b := Generate(Options{Seed: seed, Services: 120, NodeName: nodeName, NodeIPs: nodeIPs, ReservedClusterIPs: canaryIPs, LocalIPs: localIPs})
		for _, gs := range b.Services {
			for s := range gs.Shapes {
				seen[s]++
			}
			svc := gs.Service
			maxNS, maxName, maxPorts = max(maxNS, len(svc.Namespace)), max(maxName, len(svc.Name)), max(maxPorts, len(svc.Spec.Ports))
			for _, p := range svc.Spec.Ports {
				maxPort = max(maxPort, len(p.Name))
			}
			if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
				maxTimeout = max(maxTimeout, *c.ClientIP.TimeoutSeconds)
			}
		}
	}
	for _, s := range AllShapes() {
		if seen[s] == 0 {
			t.Errorf("shape %s never generated in 20 seeds", s)
		}
	}
	if maxNS != maxNamespace || maxName != 63 || maxPort != maxPortName || maxPorts < 90 || maxTimeout != 86400 {
		t.Errorf("maxima reached: namespace %d, name %d, port name %d, ports %d, affinity timeout %d; want 63, 63, 15, >=90, 86400",
			maxNS, maxName, maxPort, maxPorts, maxTimeout)
	}
}

// TestLimitCheckCatchesLongComments guards the checker itself: a comment of 128 bytes and a name
// of 256 bytes are reported, 127 and 255 are not.
func TestLimitCheckCatchesLongComments(t *testing.T) {
	mk := func(name, comment string) []string {
		return fragmentLimits(oneRule(name, comment))
	}
	if got := mk(strings.Repeat("n", 255), strings.Repeat("c", 127)); len(got) != 0 {
		t.Errorf("at the limits: got %v, want nothing", got)
	}
	if got := mk(strings.Repeat("n", 256), strings.Repeat("c", 128)); len(got) != 2 {
		t.Errorf("over the limits: got %v, want the name and the comment", got)
	}
	if got := mk("ok", "caf\xc3"); len(got) != 1 {
		t.Errorf("a comment cut inside a UTF-8 sequence: got %v, want it reported", got)
	}
}

func oneRule(name, comment string) fragment.Fragment {
	return fragment.Fragment{Chains: []fragment.ChainDef{{Chain: nft.Chain{Name: name}, Rules: []nft.Rule{{Chain: name, Comment: comment}}}}}
}
