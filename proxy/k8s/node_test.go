package k8s

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestNodeDraining(t *testing.T) {
	now := metav1.NewTime(time.Unix(1_800_000_000, 0))
	taint := func(key string, effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: key, Effect: effect}
	}
	cases := []struct {
		name string
		mod  func(n *corev1.Node)
		want string // substring; "" means eligible
	}{
		{"plain node", func(*corev1.Node) {}, ""},
		{"being deleted", func(n *corev1.Node) { n.DeletionTimestamp = &now }, "being deleted"},
		{"tainted by the cluster autoscaler", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{taint("example.com/x", corev1.TaintEffectNoSchedule), taint(ToBeDeletedTaint, corev1.TaintEffectNoSchedule)}
		}, ToBeDeletedTaint},
		{"the autoscaler's taint with another effect", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{taint(ToBeDeletedTaint, corev1.TaintEffectNoExecute)}
		}, ToBeDeletedTaint},
		// kube-proxy's rules: a candidate for deletion, a cordoned node, another taint still serve.
		{"deletion candidate", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{taint("DeletionCandidateOfClusterAutoscaler", corev1.TaintEffectPreferNoSchedule)}
		}, ""},
		{"cordoned", func(n *corev1.Node) {
			n.Spec.Unschedulable = true
			n.Spec.Taints = []corev1.Taint{taint(corev1.TaintNodeUnschedulable, corev1.TaintEffectNoSchedule)}
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := node(testNode, "198.18.0.1")
			c.mod(n)
			got := NodeDraining(n)
			if (got == "") != (c.want == "") || !strings.Contains(got, c.want) {
				t.Errorf("NodeDraining = %q, want %q", got, c.want)
			}
		})
	}
	if got := NodeDraining(nil); got != "" {
		t.Errorf("NodeDraining(nil) = %q, want \"\" (no Node seen yet: eligible, as kube-proxy at start-up)", got)
	}
}

// TestSourceFollowsNodeDraining: the Source's NodeDraining follows this Node's taint and
// deletion through the informer.
func TestSourceFollowsNodeDraining(t *testing.T) {
	client := fake.NewClientset(node(testNode, "198.18.0.1"))
	src, _ := runSource(t, client, 0)
	ctx := context.Background()
	if got := src.NodeDraining(); got != "" {
		t.Fatalf("plain node: NodeDraining = %q, want \"\"", got)
	}
	steps := []struct {
		name     string
		mod      func(n *corev1.Node)
		draining bool
	}{
		{"tainted ToBeDeletedByClusterAutoscaler", func(n *corev1.Node) {
			n.Spec.Taints = []corev1.Taint{{Key: ToBeDeletedTaint, Effect: corev1.TaintEffectNoSchedule}}
		}, true},
		{"taint removed (scale-down cancelled)", func(n *corev1.Node) { n.Spec.Taints = nil }, false},
		{"deletion started", func(n *corev1.Node) { ts := metav1.Now(); n.DeletionTimestamp = &ts }, true},
	}
	for _, st := range steps {
		n, err := client.CoreV1().Nodes().Get(ctx, testNode, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st.mod(n)
		if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, st.name, func() bool { return (src.NodeDraining() != "") == st.draining })
	}
	if err := client.CoreV1().Nodes().Delete(ctx, testNode, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "Node deleted", func() bool { return strings.Contains(src.NodeDraining(), "deleted") })
}
