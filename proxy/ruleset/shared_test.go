package ruleset

import (
	"fmt"
	"math"
	"net/netip"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// cluster is n Services of every shape without ClientIP affinity or source ranges: ClusterIP,
// NodePort/LoadBalancer/external IP, both traffic policies Local, a range, all-ports, a
// node-port block, none without endpoints, 1 to 4 endpoints.
func cluster(n int) []*model.Service {
	var out []*model.Service
	for i := 0; i < n; i++ {
		vip := netip.AddrFrom4([4]byte{198, 19, byte(1 + i/250), byte(i % 250)})
		lb := netip.AddrFrom4([4]byte{198, 19, byte(101 + i/250), byte(i % 250)})
		var eps []model.Endpoint
		for j := 0; j <= i%5; j++ { // 0 to 4 endpoints
			eps = append(eps, model.Endpoint{Addr: netip.AddrFrom4([4]byte{198, 18, byte(128 + j), byte(i % 250)}), Port: 8080,
				Ready: true, Serving: true}.At([]string{thisNode, otherNode}[j%2], ""))
		}
		eps = eps[1:]
		sp := model.ServicePort{Name: pn("ns", fmt.Sprintf("s%d", i), "p", model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080,
			ClusterIPs: []netip.Addr{vip}, Endpoints: eps}
		switch i % 7 {
		case 1:
			sp.NodePort, sp.LoadBalancerIPs = uint16(30000+i%2000), []netip.Addr{lb}
		case 2:
			sp.NodePort, sp.ExternalIPs, sp.ExternalTrafficLocal = uint16(30000+i%2000), []netip.Addr{lb}, true
		case 3:
			sp.InternalTrafficLocal = true
		case 4:
			sp.PortEnd, sp.TargetPort = 90, 0
			for j := range sp.Endpoints {
				sp.Endpoints[j].Port = 0
			}
		case 5:
			sp.AllPorts, sp.Port, sp.PortEnd, sp.TargetPort = true, 0, 0, 0
			for j := range sp.Endpoints {
				sp.Endpoints[j].Port = 0
			}
		case 6:
			sp.PortEnd, sp.TargetPort, sp.NodePort, sp.NodePortEnd = 90, 0, uint16(32000+i%500*10), uint16(32000+i%500*10+10)
			for j := range sp.Endpoints {
				sp.Endpoints[j].Port = 0
			}
		}
		out = append(out, &model.Service{Key: sp.Name.Service, Ports: []model.ServicePort{sp}})
	}
	return out
}

// TestNamedSetsDoNotGrowWithServices pins a layout goal: the kernel walks a list of a table's
// sets for every op that names one, so a set per Service makes a full sync quadratic.
func TestNamedSetsDoNotGrowWithServices(t *testing.T) {
	b := policyBuilder(t)
	small, large := b.Ruleset(testNode(), cluster(10)), b.Ruleset(testNode(), cluster(1000))
	if len(small.Sets) != len(large.Sets) {
		var extra []string
		for _, s := range large.Sets {
			if !strings.Contains(fmt.Sprint(small.Sets), s.Name+" ") {
				extra = append(extra, s.Name)
			}
		}
		if len(extra) > 5 {
			extra = append(extra[:5], "…")
		}
		t.Errorf("10 Services: %d named sets, 1000 Services: %d (more: %v); want the same count", len(small.Sets), len(large.Sets), extra)
	}
	// ClientIP affinity in an ip table keeps no set of its own either: a sticky port is a
	// shared-mode port whose choice is recorded in the shared affinity maps.
	sticky := func(svcs []*model.Service) []*model.Service {
		for _, s := range svcs {
			for i := range s.Ports {
				s.Ports[i].AffinityTimeout = 3 * time.Hour
			}
		}
		return svcs
	}
	if s, l := b.Ruleset(testNode(), sticky(cluster(10))), b.Ruleset(testNode(), sticky(cluster(1000))); len(s.Sets) != len(l.Sets) {
		t.Errorf("sticky: 10 Services: %d named sets, 1000 Services: %d; want the same count", len(s.Sets), len(l.Sets))
	}
	// Shared chains are bounded by the endpoint counts in use, not by the Services.
	own := 0
	for _, c := range large.Chains {
		if strings.HasPrefix(c.Name, "svc-") || strings.HasPrefix(c.Name, "ext-") || strings.HasPrefix(c.Name, "local-") && strings.Contains(c.Name, "/") {
			own++
		}
	}
	// Each shared chain exists once per endpoint-map shard in use: strip the shard suffix.
	kinds := func(rs *nft.Ruleset) map[string]bool {
		out := map[string]bool{}
		for _, c := range rs.Chains {
			out[shardSuffix.ReplaceAllString(c.Name, "")] = true
		}
		return out
	}
	if shared := len(large.Chains) - own; shared > len(kinds(small))*DefaultEndpointShards {
		t.Errorf("1000 Services: %d chains besides their own, want at most one per kind of chain of 10 Services (%d) and shard (%d)", shared, len(kinds(small)), DefaultEndpointShards)
	}
	if k := len(kinds(large)) - own; k > len(kinds(small))+10 {
		t.Errorf("1000 Services: %d kinds of chains besides their own, want only a few more than 10 Services' %d", k, len(kinds(small)))
	}
}

// shardSuffix is the endpoint-map shard at the end of a shared chain's name.
var shardSuffix = regexp.MustCompile(`-s[0-9]+$`)

// inShardOf returns a Service name in k's namespace whose endpoint-map shard is k's: name, or
// name with a number appended.
func inShardOf(k model.ServiceKey, name string) string {
	n := name
	for i := 0; endpointShard(model.ServiceKey{Namespace: k.Namespace, Name: n}, DefaultEndpointShards) != endpointShard(k, DefaultEndpointShards); i++ {
		n = fmt.Sprintf("%s-%d", name, i)
	}
	return n
}

// sharedWeb is the shared-mode Service of the endpoint-change tests: a NodePort/LoadBalancer
// port under externalTrafficPolicy Local with n endpoints, the first on this node.
func sharedWeb(n int) *model.Service {
	return webPort(func(sp *model.ServicePort) {
		sp.ExternalTrafficLocal = true
		sp.Endpoints = on(thisNode, pod1)
		for i := 1; i < n; i++ {
			sp.Endpoints = append(sp.Endpoints, on(otherNode, fmt.Sprintf("198.18.128.%d", 20+i))...)
		}
	})
}

// TestEndpointChangeIsElementsOnly: in shared mode an endpoint change (replaced, added or
// removed, the other endpoint counts already in use by other Services) changes only elements:
// no chain, rule or set is written, so the kernel never re-validates the table's rules.
func TestEndpointChangeIsElementsOnly(t *testing.T) {
	b := policyBuilder(t)
	others := []*model.Service{}
	for n := 1; n <= 4; n++ { // other Services using every count from 1 to 4
		s := sharedWeb(n)
		s.Key.Name = inShardOf(s.Key, fmt.Sprintf("other%d", n)) // only one shard's chains are shared
		sp := &s.Ports[0]
		sp.Name = pn("default", s.Key.Name, "http", model.TCP)
		sp.ClusterIPs, sp.LoadBalancerIPs, sp.ExternalIPs = addrs(fmt.Sprintf("198.19.1.%d", n)), addrs(fmt.Sprintf("198.19.101.%d", n)), nil
		sp.NodePort = uint16(31000 + n)
		others = append(others, s)
	}
	replaced := sharedWeb(3)
	replaced.Ports[0].Endpoints[2].Addr = netip.MustParseAddr("198.18.128.99")
	for _, c := range []struct {
		name     string
		old, new *model.Service
	}{
		{"one endpoint replaced", sharedWeb(3), replaced},
		{"one endpoint added", sharedWeb(3), sharedWeb(4)},
		{"one endpoint removed", sharedWeb(3), sharedWeb(2)},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := b.Ruleset(testNode(), append([]*model.Service{c.old}, others...))
			after := b.Ruleset(testNode(), append([]*model.Service{c.new}, others...))
			if d := objectDiff(before, after); d != "" {
				t.Errorf("chains, rules or sets changed:\n%s", d)
			}
			if reflect.DeepEqual(before.Elements, after.Elements) {
				t.Error("no element changed: the test changes nothing")
			}
		})
	}
}

// objectDiff lists the chains (with their rules) and sets that differ between a and b, whatever
// their order.
func objectDiff(a, b *nft.Ruleset) string {
	objects := func(rs *nft.Ruleset) map[string]string {
		m := map[string]string{}
		rules := map[string][]nft.Rule{}
		for _, r := range rs.Rules {
			rules[r.Chain] = append(rules[r.Chain], r)
		}
		for _, c := range rs.Chains {
			m["chain "+c.Name] = nft.Render(&nft.Ruleset{Table: rs.Table, Chains: []nft.Chain{c}, Rules: rules[c.Name]})
		}
		for _, s := range rs.Sets {
			m["set "+s.Name] = nft.Render(&nft.Ruleset{Table: rs.Table, Sets: []nft.Set{s}})
		}
		return m
	}
	oa, ob := objects(a), objects(b)
	var out []string
	for k, v := range oa {
		if ob[k] != v {
			out = append(out, fmt.Sprintf("- %s: %s", k, v))
		}
	}
	for k, v := range ob {
		if oa[k] != v {
			out = append(out, fmt.Sprintf("+ %s: %s", k, v))
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestSharedChainsAreIdenticalAndKeptOnce: every fragment that needs a shared chain declares it
// with the same rules, and the ruleset holds it once.
func TestSharedChainsAreIdenticalAndKeptOnce(t *testing.T) {
	b := policyBuilder(t)
	a, c := sharedWeb(2), sharedWeb(2)
	name := inShardOf(a.Key, "web2") // only Services of one endpoint-map shard share chains
	c.Key.Name, c.Ports[0].Name = name, pn("default", name, "http", model.TCP)
	c.Ports[0].ClusterIPs, c.Ports[0].LoadBalancerIPs, c.Ports[0].ExternalIPs, c.Ports[0].NodePort = addrs("198.19.0.50"), nil, nil, 30090
	fa, fc := b.Service(testNode(), a), b.Service(testNode(), c)
	chains := map[string]fragment.ChainDef{}
	for _, cd := range fa.Chains {
		chains[cd.Chain.Name] = cd
	}
	common := 0
	for _, cd := range fc.Chains {
		if other, ok := chains[cd.Chain.Name]; ok {
			common++
			if !reflect.DeepEqual(other, cd) {
				t.Errorf("chain %s differs between two fragments:\n %v\n %v", cd.Chain.Name, other, cd)
			}
		}
	}
	if common == 0 {
		t.Fatalf("two Services with 2 endpoints share no chain: %v and %v", fa.Chains, fc.Chains)
	}
	rs := Merge(b.Table(), fa, fc)
	seen := map[string]int{}
	for _, ch := range rs.Chains {
		seen[ch.Name]++
	}
	for name, n := range seen {
		if n != 1 {
			t.Errorf("chain %s merged %d times", name, n)
		}
	}
	rules := map[string]int{}
	for _, r := range rs.Rules {
		rules[r.Chain]++
	}
	pick := frontendKind{shard: endpointShard(a.Key, DefaultEndpointShards)}.pickChain(false, 2)
	if rules[pick] != 1 {
		t.Errorf("%s has %d rules after Merge, want 1", pick, rules[pick])
	}
}

// TestSharedModeDistribution: every frontend of a shared-mode port spreads new connections
// evenly over its own endpoints, whichever map and pick chain it goes through.
func TestSharedModeDistribution(t *testing.T) {
	three := webPort(func(sp *model.ServicePort) { sp.Endpoints = append(on(thisNode, pod1), on(otherNode, pod2, pod3)...) })
	local := sharedWeb(4)
	local.Ports[0].Endpoints = append(local.Ports[0].Endpoints, on(thisNode, "198.18.128.30")...)
	local.Key.Name, local.Ports[0].Name = "local", pn("default", "local", "http", model.TCP)
	local.Ports[0].ClusterIPs, local.Ports[0].LoadBalancerIPs, local.Ports[0].ExternalIPs = addrs("198.19.0.60"), addrs("198.19.100.60"), nil
	local.Ports[0].NodePort = 30060
	tr := newTracer(t, policyBuilder(t).Ruleset(testNode(), []*model.Service{three, local}), nodeIP, nodeBridge)
	localEPs := []string{"198.18.128.10:8080", "198.18.128.30:8080"}
	allLocal := append([]string{"198.18.128.21:8080", "198.18.128.22:8080", "198.18.128.23:8080"}, localEPs...)
	for _, c := range []struct {
		name string
		p    packet
		want []string
	}{
		{"ClusterIP", tcp(client, webIP, 80), ep123},
		{"LoadBalancer IP", tcp(client, lbIP, 80), ep123},
		{"external IP", tcp(client, extIP, 80), ep123},
		{"node port", tcp(client, nodeIP, 30080), ep123},
		{"eTP Local: ClusterIP", tcp(client, "198.19.0.60", 80), allLocal},
		{"eTP Local: LoadBalancer IP from outside", tcp(client, "198.19.100.60", 80), localEPs},
		{"eTP Local: node port from outside", tcp(client, nodeIP, 30060), localEPs},
		{"eTP Local: node port from a pod", tcp("198.18.128.50", nodeBridge, 30060), allLocal},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := tr.spread(c.p)
			if len(got) != len(c.want) {
				t.Fatalf("reaches %v, want %v", got, c.want)
			}
			for _, d := range c.want {
				if p := got[d]; math.Abs(p-1/float64(len(c.want))) > 1e-9 {
					t.Errorf("%s with probability %.4f, want 1/%d (all: %v)", d, p, len(c.want), got)
				}
			}
		})
	}
}

// TestSharedModeSourceRanges: a shared-mode LoadBalancer IP with loadBalancerSourceRanges goes
// through its own fw- chain, then where it would go without ranges (masq-pick-N, local-M-of-N).
func TestSharedModeSourceRanges(t *testing.T) {
	ranges := []netip.Prefix{netip.MustParsePrefix("198.18.1.0/28")}
	for _, c := range []struct {
		name  string
		local bool
		in    outcome
	}{
		{"externalTrafficPolicy Cluster", false, outcome{"accept", ep12, true}},
		{"externalTrafficPolicy Local", true, outcome{"accept", ep1, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			svc := webPort(func(sp *model.ServicePort) { sp.LoadBalancerSourceRanges, sp.ExternalTrafficLocal = ranges, c.local })
			rs := policyBuilder(t).Ruleset(testNode(), []*model.Service{svc})
			if !slices.ContainsFunc(rs.Chains, func(ch nft.Chain) bool { return ch.Name == FirewallChain(svc.Ports[0].Name) }) {
				t.Fatalf("no fw- chain in %v", rs.Chains)
			}
			runTraces(t, newTracer(t, rs, nodeIP, nodeBridge), []traceCase{
				{"source in range", tcp(client, lbIP, 80), c.in},
				{"source outside the ranges: dropped", tcp(outsider, lbIP, 80), dropped},
				{"external IP not filtered", tcp(outsider, extIP, 80), c.in},
				{"ClusterIP not filtered", tcp(outsider, webIP, 80), outcome{"accept", ep12, true}},
			})
		})
	}
}

// TestEndpointMapShards: the endpoint maps are split into a fixed number of shards, declared by
// the base layout whatever the Services, and the slots of 1000 Services spread over them, so no
// map holds much more than its share (a dump of a set costs the square of its size in the
// kernel); every frontend of one Service is in its Service's shard, with the chains that read it.
func TestEndpointMapShards(t *testing.T) {
	for _, shards := range []int{0, 1, 16} {
		b := testBuilder(t, func(c *Config) { c.NodeName, c.EndpointShards = thisNode, shards })
		n := shards
		if n == 0 {
			n = DefaultEndpointShards
		}
		rs := b.Ruleset(testNode(), cluster(1000))
		maps := map[string]int{}
		for _, s := range rs.Sets {
			for _, m := range []string{MapEndpoints, MapLocalEndpoints, MapNodePortEndpoints, MapLocalNodePortEndpoints} {
				if IsEndpointMap(s.Name, m) {
					maps[m]++
				}
			}
		}
		for _, m := range []string{MapEndpoints, MapLocalEndpoints, MapNodePortEndpoints, MapLocalNodePortEndpoints} {
			if maps[m] != n {
				t.Errorf("%d shards: %d maps %s-sN, want %d", shards, maps[m], m, n)
			}
		}
		total, largest := 0, 0
		for s := 0; s < n; s++ {
			k := len(rs.Elements[EndpointMap(MapEndpoints, s)])
			total, largest = total+k, max(largest, k)
		}
		if total == 0 || largest > 2*total/n+10 {
			t.Errorf("%d shards: the largest endpoint map holds %d of %d slots, want about 1/%d of them", shards, largest, total, n)
		}
		// Each Service's slots and pick chains are in its own shard.
		for _, svc := range cluster(1000)[:50] {
			f := b.Service(testNode(), svc)
			want := "-s" + strconv.Itoa(endpointShard(svc.Key, n))
			for _, e := range f.Elements {
				if strings.Contains(e.Set, "endpoints") && !strings.HasSuffix(e.Set, want) {
					t.Errorf("%d shards: %s has slots in %s, want its shard %s", shards, svc.Key, e.Set, want)
				}
			}
			for _, c := range f.Chains {
				if !strings.Contains(c.Chain.Name, "/") && !strings.HasSuffix(c.Chain.Name, want) { // a shared chain
					t.Errorf("%d shards: %s uses shared chain %s, want its shard %s", shards, svc.Key, c.Chain.Name, want)
				}
			}
		}
	}
	for _, c := range []struct {
		set  string
		want bool
	}{{"endpoints-s0", true}, {"endpoints-s63", true}, {"endpoints", false}, {"endpoints-s", false}, {"endpoints-sx", false},
		{"local-endpoints-s1", false}, {"nodeport-endpoints-s1", false}} {
		if got := IsEndpointMap(c.set, MapEndpoints); got != c.want {
			t.Errorf("IsEndpointMap(%q, %q) = %v, want %v", c.set, MapEndpoints, got, c.want)
		}
	}
	for _, bad := range []int{-1, MaxEndpointShards + 1} {
		cfg := Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000, EndpointShards: bad}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "endpoint shards") {
			t.Errorf("EndpointShards %d: Validate() = %v, want an error naming it", bad, err)
		}
	}
}

// TestNodePortsHashAndBlocksInterval: single node ports are in a hash map and node-port blocks
// in an interval map of their own, as Service ports and ranges are: the kernel's interval map
// (pipapo) costs time quadratic in the elements one transaction adds (bench/README.md, section
// B), and its lookup grows with them.
func TestNodePortsHashAndBlocksInterval(t *testing.T) {
	rs := goldenRuleset(t, goldenCases()[0])
	for _, s := range rs.Sets {
		if want := s.Name == MapNodePortRanges; (s.Name == MapNodePorts || s.Name == MapNodePortRanges) && s.Interval != want {
			t.Errorf("map %s: interval %v, want %v", s.Name, s.Interval, want)
		}
	}
	singles, blocks := rs.Elements[MapNodePorts], rs.Elements[MapNodePortRanges]
	if len(singles) == 0 || len(blocks) == 0 {
		t.Fatalf("golden cluster: %d single node ports, %d blocks; want both", len(singles), len(blocks))
	}
	for _, e := range singles {
		if e.KeyEnd != nil && !slices.Equal(e.KeyEnd, e.Key) {
			t.Errorf("%s holds a block %v-%v", MapNodePorts, e.Key, e.KeyEnd)
		}
	}
	for _, e := range blocks {
		if len(e.KeyEnd) != 2 || e.KeyEnd[1].Num <= e.Key[1].Num {
			t.Errorf("%s holds a single port %v-%v", MapNodePortRanges, e.Key, e.KeyEnd)
		}
	}
}
