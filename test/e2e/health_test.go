package e2e

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// TestHealthCheckNodePortBindsNodePortAddresses: with --nodeport-addresses, the health-check
// node port of an externalTrafficPolicy=Local Service answers on the node's addresses inside
// those CIDRs and nowhere else (it used to listen on the wildcard address), as kube-proxy.
func TestHealthCheckNodePortBindsNodePortAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(8080)}})
	lb := localLB("lb-local", 42, 30142, local(1)...)
	e.write(lb)
	e.flags = []string{"--nodeport-addresses", lab.NodeIPv4 + "/32"}
	e.start(lb)

	tier.Until(t, e.ctx, 5*time.Second, 100*time.Millisecond, "health check on "+lab.NodeIPv4+" answering 200", func() (bool, string) {
		code, body := healthCheck(t, e)
		return code == http.StatusOK, fmt.Sprintf("%d %v", code, body)
	})
	err := e.lab.Node.Do(func() error {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", healthCheckPort), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err == nil {
		t.Errorf("health-check node port %d answers on 127.0.0.1 in the node, outside --nodeport-addresses %s/32", healthCheckPort, lab.NodeIPv4)
	}
}

// TestHealthCheckNodePortHandover: another process of the node (kube-proxy, during a migration)
// holds an externalTrafficPolicy=Local Service's health-check node port when nftproxy starts.
// It keeps answering; once it exits, nftproxy opens the port by itself, with no sync needed
// (nothing changes in the cluster), and answers for the Service.
func TestHealthCheckNodePortHandover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(8080)}})
	lb := localLB("lb-handover", 43, 30143, local(1)...)
	e.write(lb)
	var other net.Listener
	if err := e.lab.Node.Do(func() (err error) {
		other, err = net.Listen("tcp", fmt.Sprintf(":%d", healthCheckPort))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	otherSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"holder":"the other process"}`))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = otherSrv.Serve(other) }()
	t.Cleanup(func() { otherSrv.Close() })

	e.start(lb)
	for range 3 {
		if code, body := healthCheck(t, e); code != http.StatusOK || body["holder"] == nil {
			t.Fatalf("while the other process holds the port: got %d %v, want its answer", code, body)
		}
	}
	otherSrv.Close()
	refused := 0
	tier.Until(t, e.ctx, 10*time.Second, 20*time.Millisecond, "nftproxy answering the freed health-check node port", func() (bool, string) {
		code, body := healthCheck(t, e)
		if code == 0 {
			refused++
		}
		svc, _ := body["service"].(map[string]any)
		return code == http.StatusOK && svc["name"] == "lb-handover", fmt.Sprintf("%d %v", code, body)
	})
	t.Logf("probes refused in the handover: %d (nftproxy retries every second)", refused)
}
