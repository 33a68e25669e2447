package e2e

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// TestCostLimit: with --max-service-cost 60, a valid Service whose rules would take more kernel
// objects (12 ports × 3 endpoints, both families: ~150) is rejected with CostLimit: the daemon
// lists it in /rejections with its cost and the limit (explain reads it there), nothing of it
// is in the kernel, and packets to it get no answer; a small Service beside it (~20) is
// programmed and answers.
func TestCostLimit(t *testing.T) {
	t.Parallel()
	var ports []fixture.Port
	for i := 0; i < 12; i++ {
		ports = append(ports, fixture.Port{Name: fmt.Sprintf("p%d", i), Protocol: "TCP", Port: int32(80 + i), Target: 8080})
	}
	web := fixture.Service{Name: "web", ClusterIPs: []netip.Addr{lab.ClusterIPv4(50), lab.ClusterIPv6(50)},
		Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}}, Endpoints: fixture.Pods(1, 2, 3)}
	wide := fixture.Service{Name: "wide", ClusterIPs: []netip.Addr{lab.ClusterIPv4(51), lab.ClusterIPv6(51)}, Ports: ports,
		Endpoints: fixture.Pods(1, 2, 3)}
	e := newEnv(t, lab.Options{Pods: 3, Clients: 1, Ports: []lab.PortSpec{lab.Port(8080)}}, web, wide)
	e.flags = []string{"--metrics-bind-address", "127.0.0.1:10249", "--max-service-cost", "60"}
	e.start(web)

	out := e.explain("default/wide")
	has(t, "explain default/wide", out, "not programmed: rejected ("+model.ReasonCostLimit+")")
	resp, err := e.lab.Node.HTTPClient(10 * time.Second).Get("http://127.0.0.1:10249/rejections")
	if err != nil {
		t.Fatalf("GET /rejections: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET /rejections: %v", err)
	}
	rej := string(body)
	has(t, "/rejections", rej, "default/wide", model.ReasonCostLimit, "over the limit of 60", "--max-service-cost")
	if rs := e.ruleset(); containsKey(rs, wide) {
		t.Errorf("the rejected Service is in the kernel:\n%s", rs)
	}
	client := e.lab.Client(1)
	if r := client.Dial(e.ctx, "tcp", hostPort(lab.ClusterIPv4(50), 80)); r.Outcome != lab.Replied {
		t.Errorf("web's ClusterIP: %v; want a reply from a pod", r)
	}
	if r := client.Dial(e.ctx, "tcp", hostPort(lab.ClusterIPv4(51), 80)); r.Outcome == lab.Replied {
		t.Errorf("the rejected Service's ClusterIP: %v; want no answer from a pod", r)
	}
	if strings.Contains(out, "service port: default/wide") {
		t.Errorf("explain shows a programmed port of the rejected Service:\n%s", out)
	}
}
