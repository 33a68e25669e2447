package property

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/lab"
)

// nodeName is the node the generated objects are for.
const nodeName = "node-a"

// nodeIPs are the Node object's addresses: the lab node's uplink addresses.
var nodeIPs = []netip.Addr{netip.MustParseAddr(lab.NodeIPv4), netip.MustParseAddr(lab.NodeIPv6)}

// localIPs are addresses the lab node holds that its Node object does not list: the pod
// bridge's gateway and client-1's link.
var localIPs = []netip.Addr{netip.MustParseAddr(lab.PodGatewayV4), netip.MustParseAddr(lab.PodGatewayV6), lab.ClientGatewayV4(1), lab.ClientGatewayV6(1)}

// canaryIPs are the canary Service's ClusterIPs; generated Services never get them.
var canaryIPs = []netip.Addr{lab.ClusterIPv4(1), lab.ClusterIPv6(1)}

var seedFlag = flag.Uint64("seed", 0, "run only this seed (also NFTPROXY_PROPERTY_SEED)")

// profile sizes a run: `go test` (part of `make test`) runs a few seeds; NFTPROXY_SOAK=1 (`make
// soak`) many more and larger batches.
type profile struct {
	name string
	// pureSeeds batches of pureServices go through the pure path; kernelSeeds batches of
	// kernelServices through the real kernel, one after the other in the same lab.
	pureSeeds, pureServices     int
	kernelSeeds, kernelServices int
	maxEndpoints                int
}

var (
	short = profile{name: "short", pureSeeds: 8, pureServices: 100, kernelSeeds: 3, kernelServices: 100, maxEndpoints: 40}
	long  = profile{name: "soak", pureSeeds: 100, pureServices: 300, kernelSeeds: 10, kernelServices: 200, maxEndpoints: 300}
)

func currentProfile() profile {
	if os.Getenv("NFTPROXY_SOAK") != "" {
		return long
	}
	return short
}

// seeds returns the seeds to run: the one asked for (flag or NFTPROXY_PROPERTY_SEED), else 1..n.
func seeds(t *testing.T, n int) []uint64 {
	if *seedFlag != 0 {
		return []uint64{*seedFlag}
	}
	if v := os.Getenv("NFTPROXY_PROPERTY_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("NFTPROXY_PROPERTY_SEED=%q: want a decimal seed", v)
		}
		return []uint64{s}
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = uint64(i + 1)
	}
	return out
}

func options(seed uint64, services int, p profile) Options {
	return Options{Seed: seed, Services: services, MaxEndpoints: p.maxEndpoints,
		NodeName: nodeName, NodeIPs: nodeIPs, ReservedClusterIPs: canaryIPs, LocalIPs: localIPs}
}

// report fails t with the failures of one batch, grouped by Service, each with its shapes and
// what was expected; for the first three that fail on their own (alone: the pure path on a
// one-Service batch), the smallest Service that still fails the same ways; and the command that
// reruns the seed.
func report(t *testing.T, test string, b *Batch, failures []Failure, alone func(*Batch) []Failure) {
	t.Helper()
	if len(failures) == 0 {
		return
	}
	byKey := map[model.ServiceKey]*Generated{}
	for _, gs := range b.Services {
		byKey[gs.Key()] = gs
	}
	grouped := map[model.ServiceKey][]string{}
	var keys []model.ServiceKey
	for _, f := range failures {
		if _, ok := grouped[f.Service]; !ok {
			keys = append(keys, f.Service)
		}
		grouped[f.Service] = append(grouped[f.Service], f.What)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var sb strings.Builder
	fmt.Fprintf(&sb, "seed %d: %d failures in %d Services (of %d)\n", b.Seed, len(failures), len(keys), len(b.Services))
	shown := 0
	for _, k := range keys {
		whats := grouped[k]
		gs := byKey[k]
		if gs == nil {
			fmt.Fprintf(&sb, "\n* %s\n", k)
		} else {
			fmt.Fprintf(&sb, "\n* %s [shapes %s] expected %v\n", k, gs.Shapes, gs.Expect)
		}
		for i, w := range whats {
			if i == 3 {
				fmt.Fprintf(&sb, "  - ... and %d more\n", len(whats)-3)
				break
			}
			fmt.Fprintf(&sb, "  - %s\n", w)
		}
		if gs != nil && alone != nil && shown < 3 {
			classesOf := func(g *Generated) map[string]bool {
				out := map[string]bool{}
				for _, f := range alone(&Batch{Seed: b.Seed, Node: b.Node, Services: []*Generated{g}}) {
					out[failureClass(f.What)] = true
				}
				return out
			}
			want := classesOf(gs)
			// A smaller Service counts only if it still fails in every way the original did.
			fails := func(g *Generated) bool {
				got := classesOf(g)
				for c := range want {
					if !got[c] {
						return false
					}
				}
				return len(want) > 0
			}
			if len(want) > 0 {
				shown++
				small := shrink(gs, fails)
				fmt.Fprintf(&sb, "  fails on its own; smallest reproduction (shrunk, still API-valid):\n%s", indent(manifests(small)))
				for _, f := range alone(&Batch{Seed: b.Seed, Node: b.Node, Services: []*Generated{small}}) {
					fmt.Fprintf(&sb, "    => %s\n", f.What)
				}
			}
		}
	}
	fmt.Fprintf(&sb, "\nrerun: NFTPROXY_PROPERTY_SEED=%d go test -count=1 -run '%s' ./test/property/", b.Seed, test)
	for _, env := range []string{"NFTPROXY_SOAK"} {
		if v := os.Getenv(env); v != "" {
			fmt.Fprintf(&sb, " (with %s=%s)", env, v)
		}
	}
	t.Error(sb.String())
}

// failureClass is a failure message without its particulars (names, numbers, quoted strings):
// its first words, for telling whether a shrunk Service still fails the same way.
func failureClass(what string) string {
	what = strings.TrimPrefix(strings.TrimPrefix(what, "family ip6: "), "family ip: ")
	words := strings.Fields(what)
	if len(words) > 3 {
		words = words[:3]
	}
	for i, w := range words {
		if strings.ContainsAny(w, "/\"0123456789") {
			words[i] = "_"
		}
	}
	return strings.Join(words, " ")
}

// manifests renders a Service and its slices as YAML documents.
func manifests(gs *Generated) string {
	var docs []string
	gs.Service.APIVersion, gs.Service.Kind = "v1", "Service"
	objs := []any{gs.Service}
	for _, s := range gs.Slices {
		s.APIVersion, s.Kind = "discovery.k8s.io/v1", "EndpointSlice"
		objs = append(objs, s)
	}
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			docs = append(docs, "# "+err.Error())
			continue
		}
		docs = append(docs, string(y))
	}
	return strings.Join(docs, "---\n")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ") + "\n"
}
