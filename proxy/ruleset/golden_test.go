package ruleset

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/nft/trace"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/golden"
	"github.com/nftproxy/nftproxy/test/netns"
)

// The golden cluster is dual-stack: every address of the plan in builder_test.go has an IPv6
// twin in fd00::/8 (Services fd00:19::/112, pods fd00:128::/64, node fd00:1::1, Service
// addresses outside the Service CIDR for LoadBalancer and external IPs).
const (
	pod1v6 = "fd00:128::10"
	pod2v6 = "fd00:128::11"
	pod3v6 = "fd00:128::12"
)

// goldenEndpoint is an endpoint of the golden cluster on node (thisNode or otherNode).
func goldenEndpoint(node, ip string, port uint16, ready bool) model.Endpoint {
	return model.Endpoint{Addr: netip.MustParseAddr(ip), Port: port, Ready: ready, Serving: true, Terminating: !ready}.At(node, "")
}

// goldenEndpoints puts pod1 on this node and pod2 and pod3 on the other, in both families;
// ports that keep the destination port take port 0.
func goldenEndpoints(port uint16, pods ...int) []model.Endpoint {
	v4, v6 := []string{pod1, pod2, pod3}, []string{pod1v6, pod2v6, pod3v6}
	var eps []model.Endpoint
	for _, p := range pods {
		node := otherNode
		if p == 1 {
			node = thisNode
		}
		eps = append(eps, goldenEndpoint(node, v4[p-1], port, true), goldenEndpoint(node, v6[p-1], port, true))
	}
	return eps
}

// goldenServices is one Service of every shape the builder knows, dual-stack: the input of
// TestRulesetGolden.
func goldenServices() []*model.Service {
	sourceRanges := []netip.Prefix{netip.MustParsePrefix("198.18.1.0/28"), netip.MustParsePrefix("fd00:1::/120")}
	port := func(svc, name string, proto model.Protocol, p uint16, mut func(*model.ServicePort)) model.ServicePort {
		sp := model.ServicePort{Name: pn("default", svc, name, proto), Port: p, PortEnd: p, TargetPort: 8080}
		mut(&sp)
		return sp
	}
	svc := func(name string, ports ...model.ServicePort) *model.Service {
		return &model.Service{Key: model.ServiceKey{Namespace: "default", Name: name}, Ports: ports}
	}
	return []*model.Service{
		// NodePort and LoadBalancer with source ranges and external IPs; a serving
		// terminating endpoint beside two ready ones (ignored while any is ready).
		svc("web", port("web", "http", model.TCP, 80, func(sp *model.ServicePort) {
			sp.NodePort = 30080
			sp.ClusterIPs = addrs(webIP, "fd00:19::10")
			sp.LoadBalancerIPs, sp.ExternalIPs = addrs(lbIP, "fd00:100::1"), addrs(extIP, "fd00:200::1")
			sp.LoadBalancerSourceRanges = sourceRanges
			sp.Endpoints = append(goldenEndpoints(8080, 1, 2),
				goldenEndpoint(otherNode, pod3, 8080, false), goldenEndpoint(otherNode, pod3v6, 8080, false))
		})),
		// externalTrafficPolicy Local with ClientIP affinity.
		svc("local", port("local", "http", model.TCP, 80, func(sp *model.ServicePort) {
			sp.NodePort, sp.HealthCheckNodePort = 30081, 30181
			sp.ClusterIPs, sp.LoadBalancerIPs = addrs("198.19.0.14", "fd00:19::14"), addrs("198.19.100.4", "fd00:100::4")
			sp.ExternalTrafficLocal, sp.AffinityTimeout = true, 3*time.Second
			sp.Endpoints = goldenEndpoints(8080, 1, 2, 3)
		})),
		// externalTrafficPolicy Local in shared mode (no affinity): one local endpoint of
		// two; and with no endpoint on this node.
		svc("local-shared", port("local-shared", "http", model.TCP, 80, func(sp *model.ServicePort) {
			sp.NodePort, sp.HealthCheckNodePort = 30082, 30182
			sp.ClusterIPs, sp.LoadBalancerIPs = addrs("198.19.0.17", "fd00:19::17"), addrs("198.19.100.5", "fd00:100::5")
			sp.ExternalTrafficLocal, sp.Endpoints = true, goldenEndpoints(8080, 1, 2)
		})),
		svc("remote", port("remote", "http", model.TCP, 80, func(sp *model.ServicePort) {
			sp.NodePort, sp.HealthCheckNodePort = 30083, 30183
			sp.ClusterIPs, sp.ExternalTrafficLocal = addrs("198.19.0.18", "fd00:19::18"), true
			sp.Endpoints = goldenEndpoints(8080, 2, 3)
		})),
		// internalTrafficPolicy Local with a local endpoint, and without one.
		svc("itp-here", port("itp-here", "http", model.TCP, 80, func(sp *model.ServicePort) {
			sp.ClusterIPs, sp.InternalTrafficLocal = addrs("198.19.0.19", "fd00:19::19"), true
			sp.Endpoints = goldenEndpoints(8080, 1, 2)
		})),
		svc("itp", port("itp", "http", model.TCP, 80, func(sp *model.ServicePort) {
			sp.ClusterIPs, sp.InternalTrafficLocal = addrs("198.19.0.20", "fd00:19::20"), true
			sp.Endpoints = goldenEndpoints(8080, 2)
		})),
		// Only a terminating endpoint left: it takes the traffic.
		svc("draining", port("draining", "http", model.TCP, 80, func(sp *model.ServicePort) {
			sp.ClusterIPs = addrs("198.19.0.22", "fd00:19::22")
			sp.Endpoints = []model.Endpoint{goldenEndpoint(otherNode, pod2, 8080, false), goldenEndpoint(otherNode, pod2v6, 8080, false)}
		})),
		// A UDP port range behind a LoadBalancer with source ranges and affinity.
		svc("rtp", port("rtp", "rtp", model.UDP, 16384, func(sp *model.ServicePort) {
			sp.PortEnd, sp.TargetPort = 16483, 0
			sp.ClusterIPs, sp.LoadBalancerIPs = addrs(rtpIP, "fd00:19::11"), addrs("198.19.100.3", "fd00:100::3")
			sp.LoadBalancerSourceRanges, sp.AffinityTimeout = sourceRanges, time.Minute
			sp.Endpoints = goldenEndpoints(0, 1, 2)
		})),
		// A port range with an identity-mapped node-port block.
		svc("sip", port("sip", "sip", model.UDP, 30500, func(sp *model.ServicePort) {
			sp.PortEnd, sp.TargetPort, sp.NodePort, sp.NodePortEnd = 30509, 0, 30500, 30509
			sp.ClusterIPs = addrs("198.19.0.15", "fd00:19::15")
			sp.Endpoints = goldenEndpoints(0, 3)
		})),
		// All ports, behind a LoadBalancer with source ranges.
		svc("any", port("any", model.AllPortsName, model.TCP, 0, func(sp *model.ServicePort) {
			sp.AllPorts, sp.PortEnd, sp.TargetPort = true, 0, 0
			sp.ClusterIPs, sp.LoadBalancerIPs = addrs(anyIP, "fd00:19::12"), addrs("198.19.100.2", "fd00:100::2")
			sp.LoadBalancerSourceRanges = sourceRanges
			sp.Endpoints = goldenEndpoints(0, 1, 3)
		})),
		// trafficDistribution PreferClose: same-zone endpoints first.
		svc("zoned", port("zoned", "http", model.TCP, 80, func(sp *model.ServicePort) {
			sp.ClusterIPs, sp.PreferClose = addrs("198.19.0.21", "fd00:19::21"), true
			for _, e := range goldenEndpoints(8080, 1, 2, 3) {
				zone := "z2"
				if a := e.Addr; a == netip.MustParseAddr(pod1) || a == netip.MustParseAddr(pod3) || a == netip.MustParseAddr(pod1v6) || a == netip.MustParseAddr(pod3v6) {
					zone = "z1"
				}
				sp.Endpoints = append(sp.Endpoints, model.Endpoint{Addr: e.Addr, Port: e.Port, Ready: true, Serving: true}.At(otherNode, zone))
			}
		})),
		// No endpoints: a port with a node port, a port without, and all-ports.
		svc("empty",
			port("empty", "dns", model.UDP, 53, func(sp *model.ServicePort) {
				sp.TargetPort, sp.NodePort, sp.ClusterIPs = 53, 30053, addrs("198.19.0.13", "fd00:19::13")
			}),
			port("empty", "dns-tcp", model.TCP, 53, func(sp *model.ServicePort) {
				sp.TargetPort, sp.ClusterIPs = 53, addrs("198.19.0.13", "fd00:19::13")
			})),
		svc("idle-any", port("idle-any", model.AllPortsName, model.UDP, 0, func(sp *model.ServicePort) {
			sp.AllPorts, sp.PortEnd, sp.TargetPort, sp.ClusterIPs = true, 0, 0, addrs("198.19.0.16", "fd00:19::16")
		})),
		// Rejected by validation: programs nothing.
		{Key: model.ServiceKey{Namespace: "default", Name: "bad"}, Rejected: &model.Rejection{Reason: "range-end-before-start", Message: "x"}},
	}
}

// goldenNode is node-a in zone z1 with addresses of both families and loopback.
func goldenNode() *model.Node {
	return &model.Node{Name: thisNode, Addresses: addrs(nodeIP, nodeBridge, "127.0.0.1", "fd00:1::1", "::1"),
		Labels: map[string]string{model.LabelTopologyZone: "z1"}}
}

// goldenCase is one builder configuration of TestRulesetGolden, named as its file.
type goldenCase struct {
	name          string
	family        nft.Family
	masqueradeAll bool
}

func goldenCases() []goldenCase {
	return []goldenCase{
		{"ip", nft.IPv4, false},
		{"ip-masquerade-all", nft.IPv4, true},
		{"ip6", nft.IPv6, false},
		{"ip6-masquerade-all", nft.IPv6, true},
	}
}

// goldenRuleset is the builder's whole output for c over the golden cluster.
func goldenRuleset(t *testing.T, c goldenCase) *nft.Ruleset {
	b := testBuilder(t, func(cfg *Config) {
		cfg.Family, cfg.MasqueradeAll, cfg.NodeName = c.family, c.masqueradeAll, thisNode
		cfg.HealthCheckPort = 10253
		cfg.ClusterCIDRs = append(cfg.ClusterCIDRs, netip.MustParsePrefix("fd00:128::/64"))
		cfg.ServiceCIDRs = append(cfg.ServiceCIDRs, netip.MustParsePrefix("fd00:19::/112"))
		// 4 endpoint-map shards, not DefaultEndpointShards: the same layout, 16 empty-ish maps
		// to read instead of 256.
		cfg.EndpointShards = 4
	})
	return b.Ruleset(goldenNode(), goldenServices())
}

func goldenPath(c goldenCase) string { return filepath.Join("testdata", "ruleset", c.name+".nft") }

// TestRulesetGolden pins the builder's whole output, as the nft text `nftproxy render` prints,
// for the golden cluster in each family with masquerade-all off and on: every rule, set and
// element, so that a deleted or changed rule fails here with a diff even when no behaviour
// test thought of it. After an intended layout change, rewrite the files with
// `go test ./proxy/ruleset -run TestRulesetGolden -update` (or `make golden`) and review the
// diff. TestKernelRulesetGolden proves the files are valid nft that means the same ruleset.
func TestRulesetGolden(t *testing.T) {
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			golden.Check(t, goldenPath(c), nft.Render(goldenRuleset(t, c)))
		})
	}
}

// TestKernelRulesetGolden proves each golden file is the ruleset the daemon programs, in valid
// nft syntax: `nft -f` of the file in a fresh namespace, read back over netlink, renders to the
// file again; the builder's ruleset applied over netlink in a second namespace (the daemon's
// path) lists exactly as the file loaded by nft; and nft's own listing loads and lists back
// identical (reloadListing).
func TestKernelRulesetGolden(t *testing.T) {
	netns.Skip(t)
	for _, c := range goldenCases() {
		t.Run(c.name, func(t *testing.T) {
			text, err := os.ReadFile(goldenPath(c))
			if err != nil {
				t.Fatalf("%v (TestRulesetGolden -update writes it)", err)
			}
			loaded := netns.New(t, "rulesetgold")
			if out, err := loaded.RunStdin(string(text), "nft", "-f", "-"); err != nil {
				t.Fatalf("nft -f %s: %v\n%s", goldenPath(c), err, out)
			}
			rs := goldenRuleset(t, c)
			k, err := nft.NewKernel(nft.WithNetNS(loaded.Fd()))
			if err != nil {
				t.Fatalf("NewKernel: %v", err)
			}
			t.Cleanup(func() { k.Close() })
			back, err := k.Dump(context.Background(), rs.Table)
			if err != nil {
				t.Fatal(err)
			}
			if d := golden.Diff(string(text), nft.Render(back)); d != "" {
				t.Errorf("nft -f of %s, read back over netlink, renders differently (- file, + read back):\n%s", goldenPath(c), d)
			}

			applied := netns.New(t, "rulesetgoldapi")
			ka, err := nft.NewKernel(nft.WithNetNS(applied.Fd()))
			if err != nil {
				t.Fatalf("NewKernel: %v", err)
			}
			t.Cleanup(func() { ka.Close() })
			if _, err := ka.Apply(context.Background(), addAll(nft.Canonical(rs))); err != nil {
				t.Fatalf("apply the golden ruleset over netlink: %v", err)
			}
			want, err := loaded.Run("nft", "list", "ruleset")
			if err != nil {
				t.Fatal(err)
			}
			got, err := applied.Run("nft", "list", "ruleset")
			if err != nil {
				t.Fatal(err)
			}
			if d := golden.Diff(want, got); d != "" {
				t.Errorf("nft list ruleset differs (- nft -f of the file, + applied over netlink):\n%s", d)
			}
			reloadListing(t, loaded, "rulesetgold2")
		})
	}
}

// TestHealthCheckNodePortRedirect traces the golden cluster's health-check node ports: TCP from
// outside to a node-port address goes to nftproxy's listener only while no socket of the node
// holds the port (another process's listener answers its own ports), the node's own probes go
// to the listener over loopback, and nothing else is redirected: another port, UDP, an address
// outside --nodeport-addresses (loopback), or without HealthCheckPort.
func TestHealthCheckNodePortRedirect(t *testing.T) {
	rs := goldenRuleset(t, goldenCases()[0])
	tr := newTracer(t, rs, nodeIP, nodeBridge, "127.0.0.1")
	held := func(p packet, sk *trace.Socket) packet { p.Socket = sk; return p }
	for _, c := range []struct {
		name string
		p    packet
		want outcome
	}{
		{"free port: to the listener", tcp(client, nodeIP, 30181), outcome{"accept", []string{nodeIP + ":10253"}, false}},
		{"every Service's port", tcp(client, nodeBridge, 30183), outcome{"accept", []string{nodeBridge + ":10253"}, false}},
		{"held on the wildcard address: not redirected", held(tcp(client, nodeIP, 30181), &trace.Socket{Wildcard: true}), outcome{"accept", nil, false}},
		{"held on the node address: not redirected", held(tcp(client, nodeIP, 30181), &trace.Socket{}), outcome{"accept", nil, false}},
		{"the node's own probe: over loopback", local(tcp(nodeIP, nodeIP, 30182)), outcome{"accept", []string{"127.0.0.1:10253"}, false}},
		{"not a health-check port", tcp(client, nodeIP, 30184), outcome{"accept", nil, false}},
		{"UDP", udp(client, nodeIP, 30181), outcome{"accept", nil, false}},
		{"loopback is no node-port address", local(tcp("127.0.0.1", "127.0.0.1", 30181)), outcome{"accept", nil, false}},
	} {
		if got := tr.run(c.p); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %s, want %s", c.name, got, c.want)
		}
	}
	b := testBuilder(t, func(cfg *Config) { cfg.NodeName = thisNode })
	if got := newTracer(t, b.Ruleset(goldenNode(), goldenServices()), nodeIP).run(tcp(client, nodeIP, 30181)); got.dnat != nil {
		t.Errorf("without HealthCheckPort: got %s, want no redirect", got)
	}
}
