package property

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	vnetns "github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeaddr"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

// kubeletPort is where a stand-in for the kubelet listens on the node's own addresses: no
// generated Service may take it.
const kubeletPort = 10250

// TestGeneratedServicesKernel is the property on the real kernel: batch after batch (each
// replacing the previous one in one sync, as a burst of changes would), generated Services go
// through the proxier and reconciler into the nftables of a lab node. Every sync succeeds and a
// full resync after it repairs nothing; the kernel's tables read back equal to the rendered
// ruleset of the accepted Services; every
// Service is programmed or rejected as its shape requires; nothing on a node address takes a
// reserved port; the `render` text of each batch loads with `nft -f` in a fresh namespace; and
// after every batch a canary ClusterIP Service answers real TCP and UDP packets from a client
// over IPv4 and IPv6, while the node's own "kubelet" port still answers from the node.
func TestGeneratedServicesKernel(t *testing.T) {
	netns.Skip(t)
	p := currentProfile()
	l := lab.New(t, lab.Options{Prefix: "nftp-prop", Pods: 1, Ports: []lab.PortSpec{lab.Port(80)}})
	kubelet, err := lab.Serve(l.Node, "node", nodeIPs, []lab.PortSpec{{Proto: "tcp", First: kubeletPort}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kubelet.Close)
	kernel, err := nft.NewKernel(nft.WithNetNS(l.Node.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { kernel.Close() })
	builders, err := newBuilders(nodeName)
	if err != nil {
		t.Fatal(err)
	}
	renderNS := netns.New(t, "nftp-prop-render")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	tr := newTracker(nodeName)
	// The node's addresses as the daemon reads them (they include localIPs).
	nodeNS := vnetns.NsHandle(l.Node.Fd())
	held, err := nodeaddr.List(&nodeNS)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range localIPs {
		if !slices.Contains(held, a) {
			t.Fatalf("the lab node does not hold %s (it holds %v): the kernel-address shape would test nothing", a, held)
		}
	}
	tr.SetLocalAddresses(held)
	canary := canaryBatch(l.Pod(1))
	feed(tr, canary)
	px := proxier.New(tr, kernel, builders, nil, testr.New(t).V(1), time.Now)
	if _, err := px.Sync(ctx, true); err != nil {
		t.Fatalf("first sync with only the canary: %v", err)
	}
	probeCanary(ctx, t, l, "before any batch")

	var prev *Batch
	for _, seed := range seeds(t, p.kernelSeeds) {
		b := Generate(options(seed, p.kernelServices, p))
		if prev != nil {
			unfeed(tr, prev)
		}
		feed(tr, b)
		prev = b
		start := time.Now()
		var failures []Failure
		if _, err := px.Sync(ctx, false); err != nil {
			failures = append(failures, Failure{What: fmt.Sprintf("the sync failed as a whole: %v", err)})
		}
		t.Logf("seed %d: %d Services synced in %v", seed, len(b.Services), time.Since(start).Round(time.Millisecond))
		// A full resync right after reads the kernel back: it must find nothing to repair.
		if res, err := px.Sync(ctx, true); err != nil {
			failures = append(failures, Failure{What: fmt.Sprintf("the full resync after the batch failed: %v", err)})
		} else if res.Repairs > 0 {
			failures = append(failures, Failure{What: fmt.Sprintf("the full resync after the batch repaired %d objects: the kernel did not hold what the sync committed", res.Repairs)})
		}
		snap := tr.Snapshot()
		failures = append(failures, checkOutcomes(b, snap)...)
		failures = append(failures, checkFragments(b, builders, snap)...)
		failures = append(failures, readBack(ctx, kernel, builders, snap)...)
		failures = append(failures, loadRender(renderNS, builders, snap)...)
		report(t, "TestGeneratedServicesKernel", b, failures, func(single *Batch) []Failure { return RunPure(single, nodeIPs).Failures })
		probeCanary(ctx, t, l, fmt.Sprintf("after the batch of seed %d", seed))
		if t.Failed() {
			return
		}
	}
	// The last batch leaves in one sync: only the canary and the base layout remain.
	unfeed(tr, prev)
	if _, err := px.Sync(ctx, false); err != nil {
		t.Fatalf("removing the last batch: %v", err)
	}
	for _, f := range readBack(ctx, kernel, builders, tr.Snapshot()) {
		t.Errorf("after removing the last batch: %v", f)
	}
	probeCanary(ctx, t, l, "after the last batch left")
}

// readBack dumps each table from the kernel and compares it with the rendered ruleset of the
// snapshot, and checks the node's safety on what the kernel really holds. Chains without rules
// that nobody wants are left out of the comparison: the reconciler flushes them at once and
// deletes them a second later (reconciler.StaleChainDelay).
func readBack(ctx context.Context, kernel nft.Interface, builders []*ruleset.Builder, snap model.Snapshot) []Failure {
	var out []Failure
	for _, bl := range builders {
		got, err := kernel.Dump(ctx, bl.Table())
		if err != nil {
			out = append(out, Failure{What: fmt.Sprintf("dump %s: %v", bl.Table(), err)})
			continue
		}
		want := bl.Ruleset(snap.Node, snap.Sorted())
		got = withoutStaleChains(got, want)
		if d := nft.Diff(nft.Canonical(got), nft.Canonical(want)); d != "" {
			out = append(out, Failure{What: fmt.Sprintf("the kernel's %s differs from the rendered ruleset (- kernel, + render):\n%s", bl.Table(), clip(d, 40))})
		}
		out = append(out, checkNodeSafety(got, append(slices.Clone(nodeIPs), localIPs...))...)
	}
	return out
}

func withoutStaleChains(got, want *nft.Ruleset) *nft.Ruleset {
	wanted := map[string]bool{}
	for _, c := range want.Chains {
		wanted[c.Name] = true
	}
	used := map[string]bool{}
	for _, r := range got.Rules {
		used[r.Chain] = true
	}
	out := *got
	out.Chains = nil
	for _, c := range got.Chains {
		if wanted[c.Name] || used[c.Name] {
			out.Chains = append(out.Chains, c)
		}
	}
	return &out
}

// loadRender loads what `nftproxy render` prints for the snapshot into a fresh namespace with
// nft itself: the text must be what nft accepts, whatever the Services' strings.
func loadRender(ns *netns.NS, builders []*ruleset.Builder, snap model.Snapshot) []Failure {
	var sb strings.Builder
	sb.WriteString("flush ruleset\n")
	for _, bl := range builders {
		sb.WriteString(nft.Render(nft.Canonical(bl.Ruleset(snap.Node, snap.Sorted()))))
	}
	if out, err := ns.RunStdin(sb.String(), "nft", "-f", "-"); err != nil {
		return []Failure{{What: fmt.Sprintf("nft -f of the render text: %v %s", clip(err.Error(), 20), out)}}
	}
	return nil
}

func clip(s string, lines int) string {
	ls := strings.Split(s, "\n")
	if len(ls) <= lines {
		return s
	}
	return strings.Join(ls[:lines], "\n") + fmt.Sprintf("\n... %d more lines", len(ls)-lines)
}

// canaryBatch is a plain dual-stack ClusterIP Service (the first ClusterIPs of the plan) on TCP
// and UDP port 80 with one ready endpoint: pod-1, which answers for real.
func canaryBatch(pod *lab.Host) *Batch {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "canary", CreationTimestamp: metav1.Unix(1, 0)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP,
			ClusterIP: canaryIPs[0].String(), ClusterIPs: []string{canaryIPs[0].String(), canaryIPs[1].String()},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			Ports: []corev1.ServicePort{
				{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(80)},
				{Name: "udp", Protocol: corev1.ProtocolUDP, Port: 80, TargetPort: intstr.FromInt32(80)},
			}},
	}
	gs := &Generated{Service: svc, Shapes: shapeSet{}, Expect: Expect{Outcome: Programmed}}
	for _, a := range []netip.Addr{pod.IPv4, pod.IPv6} {
		at := discoveryv1.AddressTypeIPv4
		if a.Is6() {
			at = discoveryv1.AddressTypeIPv6
		}
		gs.Slices = append(gs.Slices, &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: "canary-" + strings.ToLower(string(at)), Labels: map[string]string{discoveryv1.LabelServiceName: "canary"}},
			AddressType: at,
			Endpoints: []discoveryv1.Endpoint{{Addresses: []string{a.String()}, NodeName: ref(nodeName),
				Conditions: discoveryv1.EndpointConditions{Ready: ref(true), Serving: ref(true), Terminating: ref(false)}}},
			Ports: []discoveryv1.EndpointPort{
				{Name: ref("tcp"), Protocol: ref(corev1.ProtocolTCP), Port: ref(int32(80))},
				{Name: ref("udp"), Protocol: ref(corev1.ProtocolUDP), Port: ref(int32(80))},
			},
		})
	}
	return &Batch{Services: []*Generated{gs}}
}

// probeCanary sends TCP and UDP to the canary over both families, and TCP to the node's
// kubelet port, from client-1: the canary answers from pod-1, the kubelet port from the node.
func probeCanary(ctx context.Context, t *testing.T, l *lab.Lab, when string) {
	t.Helper()
	type probe struct {
		network, addr, want string
	}
	var probes []probe
	for _, a := range canaryIPs {
		for _, n := range []string{"tcp", "udp"} {
			probes = append(probes, probe{n, netip.AddrPortFrom(a, 80).String(), l.Pod(1).Name})
		}
	}
	for _, a := range nodeIPs {
		probes = append(probes, probe{"tcp", netip.AddrPortFrom(a, kubeletPort).String(), "node"})
	}
	for _, pr := range probes {
		r := l.Client(1).Dial(ctx, pr.network, pr.addr)
		if r.Outcome != lab.Replied || r.Reply.Pod != pr.want {
			t.Errorf("%s: %s %s from client-1: got %v, want a reply from %s", when, pr.network, pr.addr, r, pr.want)
		}
	}
}
