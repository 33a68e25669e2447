package node

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

// drainTaint is the taint the cluster autoscaler puts on a node it is about to delete; KEP-3836
// has service proxies fail /healthz then, so load balancers drain the node before it goes.
const drainTaint = "ToBeDeletedByClusterAutoscaler"

// New connections take source ports from freshPortFirst on, above Linux's ephemeral range
// (32768-60999), in turn: at 10 a second each port comes back after minutes, longer than a
// UDP conntrack entry lives.
const (
	freshPortFirst = 61000
	freshPorts     = 4500
)

// traffic keeps connections going while day-2 operations run: new TCP and UDP connections
// from the client to a LoadBalancer IP and from the node to a ClusterIP (the backends may
// roll), and one long-lived TCP connection and one UDP flow from the client to a backend that
// does not roll. Every connection is counted under the phase running when it began.
type traffic struct {
	f     *figures
	mu    sync.Mutex
	phase string
	fails map[string][]string // phase -> first failures, for the error message
	wrong map[string]int      // phase -> answers from a pod that is not the Service's
	stop  chan struct{}
	wg    sync.WaitGroup
}

func (tr *traffic) current() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.phase
}

func (tr *traffic) setPhase(p string) {
	tr.mu.Lock()
	tr.phase = p
	tr.mu.Unlock()
}

// record counts r under phase; an answer from anyone but a pod whose name starts with
// wantPrefix is a failure too.
func (tr *traffic) record(phase, kind string, r lab.Result, wantPrefix string) {
	wrong := r.Outcome == lab.Replied && !strings.HasPrefix(r.Reply.Pod, wantPrefix)
	if wrong {
		tr.mu.Lock()
		tr.wrong[phase]++
		tr.mu.Unlock()
	}
	tr.count(phase, kind, r.Outcome != lab.Replied || wrong, r.String())
}

// count counts one attempt of kind under phase, with what happened for the error message.
func (tr *traffic) count(phase, kind string, failed bool, what string) {
	tr.f.add(phase, kind, failed)
	if failed {
		tr.mu.Lock()
		if len(tr.fails[phase]) < 5 {
			tr.fails[phase] = append(tr.fails[phase], fmt.Sprintf("%s at %s: %s", kind, time.Now().Format("15:04:05.000"), what))
		}
		tr.mu.Unlock()
	}
}

// startTraffic starts the load; Stop ends it.
func (e *env) startTraffic(ctx context.Context, cip string) *traffic {
	tr := &traffic{f: e.figures, phase: "baseline", fails: map[string][]string{}, wrong: map[string]int{}, stop: make(chan struct{})}
	d := lab.Dialer{Timeout: 2 * time.Second, UDPAttempts: 1}
	every := tr.every
	newConn := func(kind string, ns *netns.NS, proto, addr string) {
		// Each probe from its own source port, taken in turn from above the kernel's ephemeral
		// range: a new connection is a new conntrack flow. With the kernel's random choice a
		// UDP probe sometimes reused a port within the conntrack timeout and followed that
		// flow's DNAT to a backend that had just exited (ICMP port unreachable).
		next := uint16(0)
		every(100*time.Millisecond, func() {
			phase := tr.current()
			dd := d
			dd.SourcePort = freshPortFirst + next%freshPorts
			next++
			tr.record(phase, kind, dd.Dial(ctx, ns, proto, addr), "web-")
		})
	}
	newConn("new tcp client->LB", e.node.Client, "tcp", lbWeb+":80")
	newConn("new udp client->LB", e.node.Client, "udp", lbWeb+":80")
	newConn("new tcp node->ClusterIP", e.node.NS, "tcp", cip+":80")
	newConn("new udp node->ClusterIP", e.node.NS, "udp", cip+":80")
	longFlow := func(kind, proto string) {
		var mu sync.Mutex
		f := d.Flow(e.node.Client, proto, lbSteady+":80")
		every(200*time.Millisecond, func() {
			mu.Lock()
			defer mu.Unlock()
			phase := tr.current()
			r := f.Probe(ctx)
			tr.record(phase, kind, r, "steady-")
			if r.Outcome != lab.Replied { // counted; carry on with a fresh one
				f.Close()
				f = d.Flow(e.node.Client, proto, lbSteady+":80")
			}
		})
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			<-tr.stop
			mu.Lock()
			f.Close()
			mu.Unlock()
		}()
	}
	longFlow("long-lived tcp client->LB", "tcp")
	longFlow("long-lived udp client->LB", "udp")
	return tr
}

// runPhase runs op as phase name: connections begun until 2 s after it are counted under
// name, then 2.5 s under "between phases". Any failed connection of the phase fails t.
func (tr *traffic) runPhase(t *testing.T, name string, op func()) {
	t.Helper()
	tr.setPhase(name)
	began := time.Now()
	op()
	tr.f.set(name+": operation done", time.Since(began))
	// Let connections begun during the operation finish under its name.
	time.Sleep(2 * time.Second)
	tr.setPhase("between phases")
	time.Sleep(2500 * time.Millisecond)
	failed, attempted := tr.f.failed(name)
	if attempted == 0 {
		t.Errorf("%s: no connection was attempted", name)
	}
	if failed > 0 {
		tr.mu.Lock()
		t.Errorf("%s: %d of %d connections failed; first: %s", name, failed, attempted, strings.Join(tr.fails[name], "; "))
		tr.mu.Unlock()
	}
}

// every runs fn every period until Stop.
func (tr *traffic) every(period time.Duration, fn func()) {
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-tr.stop:
				return
			case <-t.C:
				fn()
			}
		}
	}()
}

// Stop ends the load and waits for its goroutines.
func (tr *traffic) Stop() {
	close(tr.stop)
	tr.wg.Wait()
}

// day2 runs the operations an operator does on a live cluster, each under traffic, each with
// no failed connection: a rolling update of the DaemonSet to a new image, deleting the
// nftproxy pod, a rollout of the backends, and the node drain signal.
func (e *env) day2(ctx context.Context, t *testing.T) {
	cip, _ := e.serviceAddrs(ctx, t, "web")
	tr := e.startTraffic(ctx, cip)
	defer func() {
		tr.Stop()
		// The pauses between operations count too.
		if failed, attempted := tr.f.failed("between phases"); failed > 0 {
			t.Errorf("between phases: %d of %d connections failed; first: %s", failed, attempted, strings.Join(tr.fails["between phases"], "; "))
		}
	}()
	phase := func(name string, op func()) { tr.runPhase(t, name, op) }
	phase("baseline", func() { time.Sleep(3 * time.Second) })

	if !fullProfile() {
		phase("kubectl delete pod nftproxy", func() { e.deleteDaemonPod(ctx, t) })
		return
	}
	phase("DaemonSet rolling update", func() {
		old := e.daemonPods(ctx, t)
		e.deploy(ctx, tagNew)
		pods := e.waitDaemonPods(ctx, t, tagNew, old)
		e.recordPodFigures(ctx, t, pods[e.node.Name], " (rolling update)")
	})

	phase("kubectl delete pod nftproxy", func() { e.deleteDaemonPod(ctx, t) })

	phase("backend rollout", func() {
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"echo","image":%q}]}}}}`, EchoImage+":2")
		if _, err := e.cs.AppsV1().Deployments(appNS).Patch(ctx, "web", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitFor(ctx, "Deployment web rolled out", func() (bool, string) {
			d, err := e.cs.AppsV1().Deployments(appNS).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			s := d.Status
			done := s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == *d.Spec.Replicas &&
				s.Replicas == *d.Spec.Replicas && s.AvailableReplicas == *d.Spec.Replicas
			return done, fmt.Sprintf("%+v", s)
		})
		e.waitFor(ctx, "old web pods gone", func() (bool, string) {
			pods, err := e.cs.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			if err != nil {
				return false, err.Error()
			}
			return len(pods.Items) == 2, fmt.Sprintf("%d pods", len(pods.Items))
		})
	})

	phase("node drain signal (KEP-3836)", func() {
		e.setDrainTaint(ctx, t, true)
		e.waitFor(ctx, "/healthz 503 on the drain taint", func() (bool, string) {
			code, body, err := e.healthz(1)
			return err == nil && code == 503, fmt.Sprintf("%d %v %v", code, body, err)
		})
		// The taint is the first node's: the others stay in their load balancers.
		for i := 2; i <= len(e.nodes); i++ {
			if code, body, err := e.healthz(i); err != nil || code != 200 {
				t.Errorf("%s /healthz while %s is being drained: %d %v %v, want 200", NodeName(i), e.node.Name, code, body, err)
			}
		}
		// Services keep answering while the load balancers drain the node.
		time.Sleep(3 * time.Second)
		e.setDrainTaint(ctx, t, false)
		e.waitFor(ctx, "/healthz 200 once the taint is gone", func() (bool, string) {
			code, body, err := e.healthz(1)
			return err == nil && code == 200, fmt.Sprintf("%d %v %v", code, body, err)
		})
	})
}

// deleteDaemonPod deletes the nftproxy pod of the first node (the one the client's traffic
// enters), as `kubectl delete pod` does, and waits for the DaemonSet's new one to be Ready.
func (e *env) deleteDaemonPod(ctx context.Context, t *testing.T) {
	old := e.currentDaemonPod(ctx, t)
	tag := strings.TrimPrefix(e.daemonImage(ctx, t), NftproxyRepo+":")
	if err := e.cs.CoreV1().Pods(dsNamespace).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := e.waitDaemonPods(ctx, t, tag, map[string]bool{old: true})
	e.recordPodFigures(ctx, t, pods[e.node.Name], " (after delete)")
}

// daemonImage is the image the DaemonSet's template names.
func (e *env) daemonImage(ctx context.Context, t *testing.T) string {
	return e.daemonSet(ctx, t).Spec.Template.Spec.Containers[0].Image
}

// currentDaemonPod is the name of the DaemonSet's running pod on the first node.
func (e *env) currentDaemonPod(ctx context.Context, t *testing.T) string {
	pods, err := e.cs.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: dsSelector})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && podReady(&p) && p.Spec.NodeName == e.node.Name {
			return p.Name
		}
	}
	t.Fatal("no ready nftproxy pod")
	return ""
}

// setDrainTaint adds or removes the cluster autoscaler's deletion taint on the first node. The
// kubelet and the controllers write the Node too, so an update that lost a race is retried on
// a fresh copy.
func (e *env) setDrainTaint(ctx context.Context, t *testing.T, on bool) {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n, err := e.cs.CoreV1().Nodes().Get(ctx, e.node.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var taints []corev1.Taint
		for _, tn := range n.Spec.Taints {
			if tn.Key != drainTaint {
				taints = append(taints, tn)
			}
		}
		if on {
			taints = append(taints, corev1.Taint{Key: drainTaint, Value: fmt.Sprint(time.Now().Unix()), Effect: corev1.TaintEffectNoSchedule})
		}
		n.Spec.Taints = taints
		_, err = e.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}
