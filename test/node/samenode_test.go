package node

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

const (
	// sameNodeSvc is the Service of the PreferSameNode subtest; its backends are labelled
	// sameNodeLabel, one Deployment per node.
	sameNodeSvc   = "near"
	sameNodeLabel = "near-backend"
	// kcmManager is the field manager of every write kube-controller-manager makes (its user
	// agent up to the first slash); the test's own client is another.
	kcmManager = "kube-controller-manager"
	// sameNodeStreak is how many answers in a row from the expected pod mean the daemon has
	// programmed a change; sameNodeConns are then counted, and every one must come from it.
	sameNodeStreak = 8
	sameNodeConns  = 24
)

// nearBackend is the subtest's backend on one node, and nearClient a pod on that node the
// traffic comes from (besides the node itself).
func nearBackend(node string) string { return "near-" + node }
func nearClient(node string) string  { return "near-client-" + node }

// sameNodeSource is where connections come from: a node's own network namespace or a pod on
// that node.
type sameNodeSource struct {
	node, what string
	ns         *netns.NS
}

func (s sameNodeSource) String() string { return s.node + " (" + s.what + ")" }

// preferSameNode: a Service whose backends are one pod on each node, its EndpointSlice made by
// the real EndpointSlice controller. Without trafficDistribution, traffic from every node
// reaches both pods. With trafficDistribution: PreferSameNode set on the Service, the
// controller (PreferSameTrafficDistribution, beta and on by default in v1.34) writes each ready
// endpoint's hints.forNodes for its own node (checked: the test never writes a slice, and the
// slice's managed fields are all the controller's); then every connection from a node, and
// from a pod on it, must reach the pod on that node. With node-2's backend gone, node-2 has no
// endpoint hinted for it, so its traffic must fall back to node-1's pod (upstream narrows only
// when every ready endpoint has node hints and one names this node), while node-1's stays
// local.
func (e *env) preferSameNode(ctx context.Context, t *testing.T) {
	if len(e.nodes) < 2 {
		t.Skip("needs two nodes: runs in the full profile (NFTPROXY_NODE_FULL=1, make node)")
	}
	began := time.Now()
	e.ensureNamespace(ctx, appNS)
	nodes := []string{e.nodes[0].Name, e.nodes[1].Name}
	for _, n := range nodes {
		b := deployment(nearBackend(n), n, 1, "1", "8080")
		// The template's own labels: deployment's selector shares its map.
		b.Spec.Template.Labels = map[string]string{"app": nearBackend(n), "near": sameNodeLabel}
		for _, d := range []*appsv1.Deployment{b, deployment(nearClient(n), n, 1, "1", "8080")} {
			if _, err := e.cs.AppsV1().Deployments(appNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	svc := service(sameNodeSvc, "", corev1.ServiceTypeClusterIP, httpAndUDP(), nil)
	svc.Spec.Selector = map[string]string{"near": sameNodeLabel}
	if _, err := e.cs.CoreV1().Services(appNS).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Leave the cluster as Day2 expects it, pass or fail.
	defer func() {
		_ = e.cs.CoreV1().Services(appNS).Delete(ctx, sameNodeSvc, metav1.DeleteOptions{})
		for _, n := range nodes {
			for _, d := range []string{nearBackend(n), nearClient(n)} {
				_ = e.cs.AppsV1().Deployments(appNS).Delete(ctx, d, metav1.DeleteOptions{})
			}
		}
	}()

	// Before: no trafficDistribution, so the controller writes no node hints and traffic from
	// every source reaches both backends (what makes the narrowing below a change).
	backend := e.waitSameNodeSlice(ctx, t, nodes, false)
	cip, _ := e.serviceAddrs(ctx, t, sameNodeSvc)
	tcp := netip.AddrPortFrom(netip.MustParseAddr(cip), 80).String()
	var sources []sameNodeSource
	for i, n := range nodes {
		e.waitPodReady(ctx, nearClient(n))
		sources = append(sources,
			sameNodeSource{n, "node", e.nodes[i].NS},
			sameNodeSource{n, "pod", e.podNS(ctx, t, nearClient(n))})
	}
	d := lab.Dialer{Timeout: 2 * time.Second, UDPAttempts: 1}
	for _, s := range sources {
		seen := map[string]int{}
		e.waitFor(ctx, fmt.Sprintf("%s: connections to %s reaching both backends (no trafficDistribution)", s, tcp), func() (bool, string) {
			r := d.Dial(ctx, s.ns, "tcp", tcp)
			if r.Outcome == lab.Replied {
				seen[r.Reply.Pod]++
			}
			return seen[backend[nodes[0]]] > 0 && seen[backend[nodes[1]]] > 0, fmt.Sprintf("answers %v, last %s", seen, r)
		})
		t.Logf("%-16s no trafficDistribution: %v", s, seen)
	}

	// The Service asks for PreferSameNode; the controller writes the node hints.
	patched := time.Now()
	patch := []byte(`{"spec":{"trafficDistribution":"PreferSameNode"}}`)
	got, err := e.cs.CoreV1().Services(appNS).Patch(ctx, sameNodeSvc, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if td := got.Spec.TrafficDistribution; td == nil || *td != corev1.ServiceTrafficDistributionPreferSameNode {
		t.Fatalf("Service %s: the API server stored trafficDistribution %v, want PreferSameNode (feature gate PreferSameTrafficDistribution off?)", sameNodeSvc, td)
	}
	e.waitSameNodeSlice(ctx, t, nodes, true)
	e.figures.set("PreferSameNode set -> controller's node hints", time.Since(patched))
	for _, s := range sources {
		e.sameNodeAnswers(ctx, t, d, s, cip, backend[s.node])
	}

	// node-2's backend goes: the one ready endpoint left is hinted for node-1 only, so node-2
	// falls back to it; node-1 keeps its own.
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: nearBackend(nodes[1])}}
	if _, err := e.cs.AppsV1().Deployments(appNS).UpdateScale(ctx, nearBackend(nodes[1]), scale, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSameNodeSlice(ctx, t, nodes[:1], true)
	for _, s := range sources {
		e.sameNodeAnswers(ctx, t, d, s, cip, backend[nodes[0]])
	}
	if !t.Failed() {
		e.figures.set("PreferSameNode subtest (2 nodes)", time.Since(began))
	}
}

// waitSameNodeSlice waits until the controller's EndpointSlices of the subtest's Service list
// one ready endpoint on each of nodes, and no other ready one, each with hints.forNodes naming
// exactly its own node (hinted) or no node hints (not hinted); it returns the backends' pod
// names by node. It checks that what it reads is the controller's work: the slice is labelled
// as managed by the EndpointSlice controller and every field of it was last written by
// kube-controller-manager (the test never writes a slice).
func (e *env) waitSameNodeSlice(ctx context.Context, t *testing.T, nodes []string, hinted bool) map[string]string {
	var byNode map[string]string
	var slices []discoveryv1.EndpointSlice
	want := fmt.Sprintf("EndpointSlices of %s: one ready endpoint on each of %v, node hints %v", sameNodeSvc, nodes, hinted)
	e.waitFor(ctx, want, func() (bool, string) {
		list, err := e.cs.DiscoveryV1().EndpointSlices(appNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + sameNodeSvc})
		if err != nil {
			return false, err.Error()
		}
		slices = list.Items
		byNode = map[string]string{}
		var state []string
		ok := true
		for _, s := range list.Items {
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
					continue
				}
				node, pod := "", ""
				if ep.NodeName != nil {
					node = *ep.NodeName
				}
				if ep.TargetRef != nil {
					pod = ep.TargetRef.Name
				}
				var hints []string
				if ep.Hints != nil {
					for _, h := range ep.Hints.ForNodes {
						hints = append(hints, h.Name)
					}
				}
				state = append(state, fmt.Sprintf("%s on %q forNodes=%v", pod, node, hints))
				if _, dup := byNode[node]; dup || pod == "" {
					ok = false
				}
				byNode[node] = pod
				if hinted && (len(hints) != 1 || hints[0] != node) || !hinted && len(hints) != 0 {
					ok = false
				}
			}
		}
		if len(byNode) != len(nodes) {
			ok = false
		}
		for _, n := range nodes {
			if byNode[n] == "" {
				ok = false
			}
		}
		sort.Strings(state)
		return ok, strings.Join(state, "; ")
	})
	for _, s := range slices {
		if m := s.Labels[discoveryv1.LabelManagedBy]; m != "endpointslice-controller.k8s.io" {
			t.Errorf("EndpointSlice %s: %s=%q, want the EndpointSlice controller's", s.Name, discoveryv1.LabelManagedBy, m)
		}
		var managers []string
		for _, f := range s.ManagedFields {
			managers = append(managers, f.Manager+"/"+string(f.Operation))
			if f.Manager != kcmManager {
				t.Errorf("EndpointSlice %s: fields written by %q (%s), want only %s's", s.Name, f.Manager, f.Operation, kcmManager)
			}
		}
		if len(managers) == 0 {
			t.Errorf("EndpointSlice %s: no managed fields; cannot tell who wrote it", s.Name)
		}
		t.Logf("EndpointSlice %s (managers %v): %v", s.Name, managers, byNode)
	}
	return byNode
}

// sameNodeAnswers waits until connections from s to the Service answer from pod want
// sameNodeStreak times in a row (the daemon has programmed the change), then requires every
// one of sameNodeConns TCP connections and a few UDP ones to be answered by it.
func (e *env) sameNodeAnswers(ctx context.Context, t *testing.T, d lab.Dialer, s sameNodeSource, cip, want string) {
	addr := netip.AddrPortFrom(netip.MustParseAddr(cip), 80).String()
	streak := 0
	e.waitFor(ctx, fmt.Sprintf("%s: %d answers in a row from %s", s, sameNodeStreak, want), func() (bool, string) {
		r := d.Dial(ctx, s.ns, "tcp", addr)
		if r.Outcome == lab.Replied && r.Reply.Pod == want {
			streak++
		} else {
			streak = 0
		}
		return streak >= sameNodeStreak, r.String()
	})
	for _, proto := range []string{"tcp", "udp"} {
		n := sameNodeConns
		if proto == "udp" {
			n = probesPer
		}
		seen := map[string]int{}
		var first string
		for range n {
			r := d.Dial(ctx, s.ns, proto, addr)
			if r.Outcome != lab.Replied {
				seen[r.Outcome.String()]++
			} else {
				seen[r.Reply.Pod]++
			}
			if (r.Outcome != lab.Replied || r.Reply.Pod != want) && first == "" {
				first = r.String()
			}
		}
		if seen[want] != n {
			t.Errorf("%s %s %s: %d connections answered %v (first wrong: %s); want every one from %s", s, proto, addr, n, seen, first, want)
		} else {
			t.Logf("%-16s %s %s -> %v", s, proto, addr, seen)
		}
	}
}

// waitPodReady waits for a Ready pod labelled app=app.
func (e *env) waitPodReady(ctx context.Context, app string) {
	e.waitFor(ctx, "a Ready pod app="+app, func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err.Error()
		}
		var states []string
		for i := range pods.Items {
			if podReady(&pods.Items[i]) && pods.Items[i].DeletionTimestamp == nil {
				return true, ""
			}
			states = append(states, podState(&pods.Items[i]))
		}
		return false, strings.Join(states, "; ")
	})
}
