package e2e

import (
	"os"
	"testing"

	"github.com/nftproxy/nftproxy/test/lab"
)

// TestDaemonWarnsEphemeralOverlap: the daemon checks its own node's ephemeral ports, read in its
// network namespace (only the allocator's leader used to, on its node). The
// node's ip_local_port_range is set to cover the default node-port range with part of it
// reserved: the daemon names the overlap in a warning and counts it in
// nftproxy_ephemeral_overlap_ports, while the test's own namespace keeps its value.
func TestDaemonWarnsEphemeralOverlap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 1})
	err := e.lab.Node.Do(func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("30000 40000"), 0o644); err != nil {
			return err
		}
		return os.WriteFile("/proc/sys/net/ipv4/ip_local_reserved_ports", []byte("31000-31999"), 0o644)
	})
	if err != nil {
		t.Fatalf("set the node's ephemeral ports: %v", err)
	}
	const metricsAddr = "127.0.0.1:10249"
	e.flags = []string{"--metrics-bind-address", metricsAddr}
	e.start()
	defer e.stop()
	e.waitLog("--service-node-port-range 30000-32767 overlaps the node's ephemeral ports at 30000-30999,32000-32767")
	e.waitMetric(metricsAddr, `nftproxy_ephemeral_overlap_ports{range="node_port_range"} 1768`)
	e.waitMetric(metricsAddr, `nftproxy_ephemeral_overlap_ports{range="block_range"} 0`)
}
