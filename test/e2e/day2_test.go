package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// Day-2 behaviours that need the daemon's after-sync work: stale UDP conntrack
// entries deleted when an endpoint goes, and the health-check node port of an
// externalTrafficPolicy=Local Service following its local endpoints.

const (
	mediaStart, mediaEnd = 16600, 16609
	healthCheckPort      = 31999
)

// TestUDPFlowMovesWhenItsEndpointGoes: an RTP-style UDP stream to a range Service keeps its
// 5-tuple; when its endpoint is replaced, the daemon deletes the stale conntrack entry so the
// next datagram of the same stream reaches the new endpoint instead of the old one (which
// still answers here, so a stale entry would show).
func TestUDPFlowMovesWhenItsEndpointGoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.PortRange(mediaStart, mediaEnd)}})
	media := fixture.Service{Name: "media", ClusterIPs: []netip.Addr{lab.ClusterIPv4(40)},
		Ports:       []fixture.Port{{Name: "rtp", Protocol: "UDP", Port: mediaStart}},
		Annotations: map[string]string{"nftproxy.io/port-ranges": fmt.Sprintf("rtp=%d-%d", mediaStart, mediaEnd)},
		Endpoints:   local(2)}
	e.write(media)
	e.start(media)

	dst := hostPort(lab.ClusterIPv4(40), mediaStart+5)
	flow := lab.NewFlow(e.lab.Client(1).NS, "udp", dst)
	defer flow.Close()
	masq4 := netip.MustParseAddr(lab.PodGatewayV4)
	replied(podNames(2), mediaStart+5, masq4).check(t, "before: "+dst, flow.Probe(e.ctx))
	if ct, err := e.lab.Conntrack("-p", "udp", "--orig-dst", lab.ClusterIPv4(40).String()); err != nil || !strings.Contains(ct, lab.PodIPv4(2).String()) {
		t.Fatalf("no conntrack entry of the flow to pod-2 (err %v):\n%s", err, ct)
	}

	media.Endpoints = local(1)
	e.write(media)
	e.waitFor("pod-1 as the only endpoint", func(rs string) bool {
		return strings.Contains(rs, "dnat to "+lab.PodIPv4(1).String()) && !strings.Contains(rs, "dnat to "+lab.PodIPv4(2).String())
	})
	// The cleanup runs right after the commit; give it a moment without depending on timing:
	// probe until the answer changes or the deadline passes.
	deadline := time.Now().Add(5 * time.Second)
	var last lab.Result
	for {
		last = flow.Probe(e.ctx)
		if last.Outcome == lab.Replied && last.Reply.Pod == "pod-1" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	replied(podNames(1), mediaStart+5, masq4).check(t, "after the endpoint moved, same 5-tuple: "+dst, last)
	ct, err := e.lab.Conntrack("-p", "udp", "--orig-dst", lab.ClusterIPv4(40).String())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(ct, "src="+lab.PodIPv4(2).String()+" ") {
		t.Errorf("a conntrack entry still replies from the removed endpoint pod-2:\n%s", ct)
	}
}

// healthCheck asks the node's health-check node port from client-1, as a load balancer would:
// the status code (0 when nothing answered) and the JSON body.
func healthCheck(t *testing.T, e *env) (int, map[string]any) {
	t.Helper()
	url := "http://" + hostPort(netip.MustParseAddr(lab.NodeIPv4), healthCheckPort) + "/healthz"
	r, err := tier.Get(e.ctx, e.lab.Client(1).NS, url)
	if err != nil {
		return 0, nil
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(r.Body), &body); err != nil {
		t.Fatalf("health check %s: body is not JSON: %v", url, err)
	}
	return r.Code, body
}

// localLB is an IPv4 LoadBalancer Service from port 80 to 8080 on ClusterIPv4(n) and
// LoadBalancerIPv4(n), externalTrafficPolicy Local with health-check node port healthCheckPort.
func localLB(name string, n int, nodePort int32, eps ...fixture.Endpoint) fixture.Service {
	lb := policyWeb(name, n, eps...)
	lb.Type, lb.Ports[0].NodePort, lb.LoadBalancerIPs = "LoadBalancer", nodePort, []netip.Addr{lab.LoadBalancerIPv4(n)}
	lb.AllocateNodePorts, lb.Edit = ptrTo(true), externalLocal(healthCheckPort)
	return lb
}

// TestHealthCheckNodePortFollowsLocalEndpoints: 200 with the local endpoint count while this
// node has a ready local endpoint, 503 once it has none.
func TestHealthCheckNodePortFollowsLocalEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(8080)}})
	lb := localLB("lb-local", 41, 30141, append(local(1), remote(2)...)...)
	e.write(lb)
	e.start(lb)

	check := func(step string, wantCode int, wantLocal float64) {
		t.Helper()
		what := fmt.Sprintf("%s: health check answering %d with localEndpoints %v", step, wantCode, wantLocal)
		tier.Until(t, e.ctx, 5*time.Second, 100*time.Millisecond, what, func() (bool, string) {
			code, body := healthCheck(t, e)
			got, _ := body["localEndpoints"].(float64)
			return code == wantCode && got == wantLocal, fmt.Sprintf("%d %v", code, body)
		})
	}
	check("one local endpoint", http.StatusOK, 1)
	lb.Endpoints = remote(1, 2)
	e.write(lb)
	check("no local endpoint", http.StatusServiceUnavailable, 0)
}
