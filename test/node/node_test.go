package node

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	dsNamespace = "kube-system"
	dsName      = "nftproxy"
	dsSelector  = "app.kubernetes.io/name=nftproxy"
	metricsURL  = "http://127.0.0.1:10265/metrics"
)

// fullProfile reports whether every day-2 operation runs (NFTPROXY_NODE_FULL, set by
// `make node`). The short profile, in `go test ./...` and `make test`, deploys, probes every
// Service kind from every source, and deletes the nftproxy pod under traffic.
func fullProfile() bool { return os.Getenv("NFTPROXY_NODE_FULL") != "" }

// TestNode runs nftproxy as its users do: `kubectl apply -k` of deploy/ (through an overlay
// naming this cluster's API server, ranges and image tag), a DaemonSet pod started by a real
// kubelet on containerd, Services made from selectors and EndpointSlices made by the
// controller, traffic from a pod, the node and a client outside it; with two nodes,
// trafficDistribution PreferSameNode with the controller's node hints; then the day-2
// operations under traffic. One node is set up once for all of it (half a minute), so the phases are
// subtests of one test.
func TestNode(t *testing.T) {
	e := start(t)
	t.Cleanup(func() { e.figures.print(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if !t.Run("DaemonSet", func(t *testing.T) { e.deployNftproxy(ctx, t) }) {
		t.FailNow()
	}
	if !t.Run("Services", func(t *testing.T) { e.services(ctx, t) }) {
		t.FailNow()
	}
	t.Run("PreferSameNode", func(t *testing.T) { e.preferSameNode(ctx, t) })
	t.Run("Day2", func(t *testing.T) { e.day2(ctx, t) })
}

// deployNftproxy applies the overlay and waits for the DaemonSet's pod to be Ready through
// its readiness probe (/healthz: informers synced and the first sync done).
func (e *env) deployNftproxy(ctx context.Context, t *testing.T) {
	applied := time.Now()
	e.deploy(ctx, tagOld)
	pods := e.waitDaemonPods(ctx, t, tagOld, nil)
	e.figures.set("apply -> nftproxy pod Ready on every node", time.Since(applied))
	e.recordPodFigures(ctx, t, pods[e.node.Name], "")
	for _, pod := range pods {
		e.checkShippedPod(t, pod)
		e.checkProcess(t, pod)
		e.checkNoWarnings(ctx, t, pod.Name)
	}
}

// checkProcess reads what the runtime gave the daemon's process, not what the manifest asks:
// user 0, effective, permitted and bounding capabilities NET_ADMIN alone, no new privileges,
// and a read-only root.
func (e *env) checkProcess(t *testing.T, p *corev1.Pod) {
	var node *Node
	for _, n := range e.nodes {
		if n.Name == p.Spec.NodeName {
			node = n
		}
	}
	if node == nil || len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s: node %q or container status missing", p.Name, p.Spec.NodeName)
	}
	pid, err := node.PodPID(p.Status.ContainerStatuses[0].ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	const netAdmin = "0000000000001000" // 1 << CAP_NET_ADMIN (12)
	want := map[string]string{"Uid:": "0", "CapEff:": netAdmin, "CapPrm:": netAdmin, "CapBnd:": netAdmin, "NoNewPrivs:": "1"}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && want[f[0]] != "" {
			if f[1] != want[f[0]] {
				t.Errorf("pod %s process %d: %s %s, want %s", p.Name, pid, f[0], f[1], want[f[0]])
			}
			delete(want, f[0])
		}
	}
	if len(want) > 0 {
		t.Errorf("pod %s process %d: /proc status has no %v", p.Name, pid, want)
	}
	mounts, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) > 5 && f[4] == "/" {
			if !strings.HasPrefix(f[5], "ro") {
				t.Errorf("pod %s process %d: root mounted %s, want read-only", p.Name, pid, f[5])
			}
			return
		}
	}
	t.Errorf("pod %s process %d: no root mount in its mountinfo", p.Name, pid)
}

// checkNoWarnings fails on Warning events about the nftproxy pod or DaemonSet: what the
// kubelet and the controllers object to in the shipped manifests (a refused field, a failed
// mount, a probe that failed on the way to Ready).
func (e *env) checkNoWarnings(ctx context.Context, t *testing.T, pod string) {
	evs, err := e.cs.CoreV1().Events(dsNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs.Items {
		about := ev.InvolvedObject.Name == pod || (ev.InvolvedObject.Kind == "DaemonSet" && ev.InvolvedObject.Name == dsName)
		if about && ev.Type == corev1.EventTypeWarning {
			t.Errorf("Warning event on %s %s: %s: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.Message)
		}
	}
}

// waitDaemonPods waits until the DaemonSet has, on every node, a pod that is not in old, runs
// image tag and is Ready; it returns them by node.
func (e *env) waitDaemonPods(ctx context.Context, t *testing.T, tag string, old map[string]bool) map[string]*corev1.Pod {
	var ready map[string]*corev1.Pod
	e.firstSync = 0
	e.waitFor(ctx, "an nftproxy pod Ready with tag "+tag+" on every node", func() (bool, string) {
		e.sampleFirstSync()
		pods, err := e.cs.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: dsSelector})
		if err != nil {
			return false, err.Error()
		}
		ready = map[string]*corev1.Pod{}
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			states = append(states, podState(p))
			if old[p.Name] || p.DeletionTimestamp != nil || len(p.Spec.Containers) == 0 ||
				p.Spec.Containers[0].Image != NftproxyRepo+":"+tag || !podReady(p) {
				continue
			}
			ready[p.Spec.NodeName] = p
		}
		return len(ready) == len(e.nodes), strings.Join(states, "; ")
	})
	return ready
}

// daemonPods are the names of the DaemonSet's current pods.
func (e *env) daemonPods(ctx context.Context, t *testing.T) map[string]bool {
	pods, err := e.cs.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: dsSelector})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range pods.Items {
		out[p.Name] = true
	}
	return out
}

// podState is a one-line account of a pod for wait messages.
func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("%s %s node=%q", p.Name, p.Status.Phase, p.Spec.NodeName)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			s += fmt.Sprintf(" %s=%s(%s)", c.Type, c.Status, c.Message)
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case cs.State.Waiting != nil:
			s += fmt.Sprintf(" %s waiting %s: %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0:
			s += fmt.Sprintf(" %s exited %d: %s", cs.Name, cs.State.Terminated.ExitCode, cs.State.Terminated.Message)
		}
		if cs.RestartCount > 0 {
			s += fmt.Sprintf(" %s restarts=%d", cs.Name, cs.RestartCount)
		}
	}
	return s
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// sampleFirstSync reads the daemon's metrics while a new pod starts: the first nonzero last-sync
// time of a process that started after the one seen before is its first sync (read every
// 100 ms, so a second sync within that time would hide the first).
func (e *env) sampleFirstSync() {
	if e.firstSync != 0 {
		return
	}
	m, err := e.metrics()
	if err != nil {
		return // not listening yet
	}
	start, last := m["process_start_time_seconds"], m["nftproxy_last_sync_timestamp_seconds"]
	if start <= e.procStart || last == 0 {
		return
	}
	e.procStart = start
	e.firstSync = time.Duration((last - start) * float64(time.Second))
}

// recordPodFigures prints how long the new daemon took to its first sync (its own metrics)
// and from container start to Ready (the pod's status).
func (e *env) recordPodFigures(ctx context.Context, t *testing.T, pod *corev1.Pod, suffix string) {
	if e.firstSync == 0 {
		e.sampleFirstSync() // Ready came before the next sample
	}
	if e.firstSync == 0 {
		t.Errorf("no first sync seen in the new daemon's metrics (%s)", metricsURL)
	} else {
		e.figures.set("daemon process start -> first sync"+suffix, e.firstSync)
	}
	var started time.Time
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil {
			started = cs.State.Running.StartedAt.Time
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && !started.IsZero() {
			// Both are in whole seconds (the API's precision).
			e.figures.set("daemon container start -> pod Ready (1 s steps)"+suffix, c.LastTransitionTime.Sub(started))
		}
	}
}

// checkShippedPod checks that the pod runs what deploy/ ships: the init container privileged
// and done, the daemon with NET_ADMIN only on a read-only root, never restarted.
func (e *env) checkShippedPod(t *testing.T, p *corev1.Pod) {
	if len(p.Spec.InitContainers) != 1 || len(p.Spec.Containers) != 1 {
		t.Fatalf("pod %s: %d init containers, %d containers; deploy/ ships 1 and 1", p.Name, len(p.Spec.InitContainers), len(p.Spec.Containers))
	}
	ic, c := p.Spec.InitContainers[0], p.Spec.Containers[0]
	if ic.SecurityContext == nil || ic.SecurityContext.Privileged == nil || !*ic.SecurityContext.Privileged {
		t.Errorf("init container: not privileged: %+v", ic.SecurityContext)
	}
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil || fmt.Sprint(sc.Capabilities.Add) != "[NET_ADMIN]" || fmt.Sprint(sc.Capabilities.Drop) != "[ALL]" ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || (sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("daemon container security context %+v: want NET_ADMIN only, read-only root, not privileged", sc)
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
			t.Errorf("init container status %+v: want terminated with exit code 0", s.State)
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.RestartCount != 0 {
			t.Errorf("daemon container restarted %d times", s.RestartCount)
		}
	}
}

// metrics reads nftproxy's /metrics on the first node's loopback and returns the unlabelled
// samples.
func (e *env) metrics() (map[string]float64, error) {
	resp, err := e.node.NS.HTTPClient(5 * time.Second).Get(metricsURL)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || strings.HasPrefix(line, "#") || strings.Contains(f[0], "{") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, nil
}

// healthz is /healthz's status code and body on node n, asked on its address as a load
// balancer would.
func (e *env) healthz(n int) (int, map[string]any, error) {
	resp, err := e.node.Client.HTTPClient(5 * time.Second).Get("http://" + NodeIP(n) + ":10266/healthz")
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var body map[string]any
	err = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body, err
}

// daemonSet is the live DaemonSet.
func (e *env) daemonSet(ctx context.Context, t *testing.T) *appsv1.DaemonSet {
	ds, err := e.cs.AppsV1().DaemonSets(dsNamespace).Get(ctx, dsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}
