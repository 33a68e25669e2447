package k8s

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// createLocalLB creates s as a LoadBalancer Service with externalTrafficPolicy Local and
// returns the health-check node port the API server allocated for it.
func (e *env) createLocalLB(s fixture.Service) int {
	e.t.Helper()
	s.Type = corev1.ServiceTypeLoadBalancer
	s.Edit = func(o *corev1.Service) { o.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal }
	created := e.createService(s)
	if created.Spec.HealthCheckNodePort == 0 {
		e.t.Fatalf("Service %s: the API server allocated no healthCheckNodePort", s.Name)
	}
	return int(created.Spec.HealthCheckNodePort)
}

// healthCheck probes the health-check node port on the node's IPv4 address from a client, as a
// load balancer does; the status line.
func (e *env) healthCheck(port int) string {
	e.t.Helper()
	r, err := tier.Get(e.ctx, e.lab.Client(1).NS, fmt.Sprintf("http://%s:%d/", lab.NodeIPv4, port))
	if err != nil {
		return "error: " + err.Error()
	}
	return r.Status
}

// waitUntil polls cond (bounded by waitBound) and fails with what when it never holds.
func (e *env) waitUntil(what string, cond func() (bool, string)) {
	e.t.Helper()
	tier.Until(e.t, e.ctx, waitBound, 250*time.Millisecond, what, cond)
}

// metric reads one series from the daemon's /metrics inside the node ("" if absent).
func (e *env) metric(series string) string {
	e.t.Helper()
	r, err := tier.Get(e.ctx, e.lab.Node, "http://"+e.metricsAddr+"/metrics")
	if err != nil {
		e.t.Fatalf("/metrics: %v", err)
	}
	for _, l := range strings.Split(r.Body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// TestAPIServerOutage stops the API server under a running daemon: the programmed rules keep
// serving, and neither /healthz nor the health-check node port of an externalTrafficPolicy=Local
// Service fails, however long the outage lasts past --healthz-timeout (cloud load balancers
// would take every node out of every such Service at once). The outage is reported: /healthz's
// body names it and nftproxy_source_up reads 0. /livez stays up. Once the API server is back, a
// change made then is programmed (the informers re-list). The health-check port is opened on the
// --nodeport-addresses only.
func TestAPIServerOutage(t *testing.T) {
	const timeout = 3 * time.Second
	e := newEnv(t, map[string]string{"healthz-timeout": timeout.String(), "nodeport-addresses": lab.NodeIPv4 + "/32"})
	web := httpService("web", 50, 1)
	e.createService(web)
	lb := httpService("lb", 51, 1)
	hcPort := e.createLocalLB(lb)
	e.waitFor("web with its endpoint", func(rs string) bool { return slotsHaveOnly(rs, web, []int{1}) })
	e.waitUntil("health-check node port answers 200", func() (bool, string) {
		got := e.healthCheck(hcPort)
		return strings.Contains(got, " 200 "), got
	})
	if _, err := tier.Get(e.ctx, e.lab.Node, fmt.Sprintf("http://127.0.0.1:%d/", hcPort)); err == nil {
		t.Errorf("health-check node port answers on 127.0.0.1, outside --nodeport-addresses %s/32", lab.NodeIPv4)
	}

	e.c.Stop()
	if e.c.Running() {
		t.Fatal("API server still running after Stop")
	}
	e.probe(web, 1)
	// Until the outage is reported and has outlasted the timeout twice over, every probe of
	// /healthz and of the health-check node port must answer 200.
	var reportedAt time.Time
	deadline := time.Now().Add(waitBound)
	for reportedAt.IsZero() || time.Since(reportedAt) < 2*timeout+time.Second {
		if time.Now().After(deadline) {
			t.Fatalf("the outage was not reported in /healthz's body within %v", waitBound)
		}
		r, err := tier.Get(e.ctx, e.lab.Node, "http://"+e.healthzAddr+"/healthz")
		status, body := r.Status, r.Body
		if err != nil || !strings.Contains(status, " 200 ") {
			t.Fatalf("/healthz during the outage: %q %s (err %v), want 200: an unreachable API server must not fail it", status, body, err)
		}
		if got := e.healthCheck(hcPort); !strings.Contains(got, " 200 ") {
			t.Fatalf("health-check node port during the outage: %q, want 200 (load balancers would drop the node)", got)
		}
		if reportedAt.IsZero() && strings.Contains(body, "sourceFailingSince") {
			reportedAt = time.Now()
		}
		time.Sleep(250 * time.Millisecond)
	}
	if got := e.metric(`nftproxy_source_up{source="apiserver"}`); got != "0" {
		t.Errorf(`nftproxy_source_up{source="apiserver"} during the outage: %q, want 0`, got)
	}
	if got := e.health("/livez"); !strings.Contains(got, " 200 ") {
		t.Errorf("/livez during the outage: %q, want 200 (restarting the proxy would not help)", got)
	}
	e.probe(web, 1)
	if err := e.c.Restart(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.waitUntil("the source reported up again", func() (bool, string) {
		got := e.metric(`nftproxy_source_up{source="apiserver"}`)
		return got == "1", got
	})
	e.waitHealth("/healthz after the outage", "/healthz", " 200 ")
	e.probe(web, 1)
	e.setEndpoints(web, 2)
	e.waitFor("web moved to pod-2 after the outage", func(rs string) bool { return slotsHaveOnly(rs, web, []int{2}) })
	e.probe(web, 2)
}

// TestNodeDrainingFailsHealthz: a Node tainted ToBeDeletedByClusterAutoscaler, or being deleted,
// makes /healthz answer 503 (KEP-3836, as kube-proxy) so load balancers drain the node; /livez
// and the health-check node ports do not follow it (kube-proxy's semantics: the node's local
// endpoints leave by themselves), and the rules keep serving.
func TestNodeDrainingFailsHealthz(t *testing.T) {
	e := newEnv(t, nil)
	lb := httpService("lb", 52, 1)
	hcPort := e.createLocalLB(lb)
	e.waitProgrammed(lb)
	e.waitHealth("/healthz before the taint", "/healthz", " 200 ")

	taint := func(on bool) {
		t.Helper()
		n, err := e.cs.CoreV1().Nodes().Get(e.ctx, fixture.NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Taints = nil
		if on {
			n.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Value: "1700000000", Effect: corev1.TaintEffectNoSchedule}}
		}
		if _, err := e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	taint(true)
	e.waitHealth("/healthz with the autoscaler's taint", "/healthz", " 503 ")
	if r, _ := tier.Get(e.ctx, e.lab.Node, "http://"+e.healthzAddr+"/healthz"); !strings.Contains(r.Body, `"nodeEligible":false`) {
		t.Errorf("/healthz body with the taint: %s, want nodeEligible false", r.Body)
	}
	if got := e.health("/livez"); !strings.Contains(got, " 200 ") {
		t.Errorf("/livez with the taint: %q, want 200", got)
	}
	if got := e.healthCheck(hcPort); !strings.Contains(got, " 200 ") {
		t.Errorf("health-check node port with the taint: %q, want 200 (it follows the rules and the local endpoints)", got)
	}
	if got := e.metric("nftproxy_node_eligible"); got != "0" {
		t.Errorf("nftproxy_node_eligible with the taint: %q, want 0", got)
	}
	e.probe(lb, 1)
	taint(false)
	e.waitHealth("/healthz once the taint is removed", "/healthz", " 200 ")

	// Deletion: a finalizer keeps the Node object while its deletionTimestamp is set.
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, fixture.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Finalizers = append(n.Finalizers, "nftproxy.io/test")
	if _, err := e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := e.cs.CoreV1().Nodes().Delete(e.ctx, fixture.NodeName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitHealth("/healthz while the Node is being deleted", "/healthz", " 503 ")
	if got := e.health("/livez"); !strings.Contains(got, " 200 ") {
		t.Errorf("/livez while the Node is being deleted: %q, want 200", got)
	}
	e.probe(lb, 1)
	// Let the deletion finish, so the API server holds nothing pending when it stops.
	if n, err = e.cs.CoreV1().Nodes().Get(e.ctx, fixture.NodeName, metav1.GetOptions{}); err == nil {
		n.Finalizers = nil
		_, err = e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Errorf("remove the test's finalizer: %v", err)
	}
}
