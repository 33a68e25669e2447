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
