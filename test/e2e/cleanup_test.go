package e2e

import (
	"net/netip"
	"testing"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// takeoverIPv4 plays another proxy whose rules exist in IPv4 only (kube-proxy during a rollback,
// synced in its first family, not yet in its second): a NAT chain and a rule using conntrack.
const takeoverIPv4 = `table ip takeover {
	chain nat { type nat hook prerouting priority -100; policy accept; }
	chain filter { type filter hook forward priority 0; policy accept; ct state invalid drop; }
}
`

// TestCleanupKeepsConnectionsOnlyWhereAnotherProxyRuns is the kernel behaviour the rollback's
// order rests on (deploy/MIGRATION.md, rollback step 2): once `nftproxy cleanup` has removed its
// tables, connections its rules translated keep being translated only in a family where another
// table still holds a NAT chain and a rule using conntrack. With such a table in IPv4 only, an
// IPv4 connection opened through nftproxy still answers after the cleanup and the IPv6 one does
// not: the kernel no longer tracks or translates IPv6.
func TestCleanupKeepsConnectionsOnlyWhereAnotherProxyRuns(t *testing.T) {
	t.Parallel()
	svc := fixture.Service{
		Name:       "web",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(31), lab.ClusterIPv6(31)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1),
	}
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{lab.Port(8080)}}, svc)
	e.start(svc)
	flows := map[string]*lab.Flow{}
	for fam, ip := range map[string]netip.Addr{"IPv4": lab.ClusterIPv4(31), "IPv6": lab.ClusterIPv6(31)} {
		f := lab.NewFlow(e.lab.Client(1).NS, "tcp", hostPort(ip, 80))
		t.Cleanup(f.Close)
		if r := f.Probe(e.ctx); r.Outcome != lab.Replied || r.Reply.Pod != "pod-1" {
			t.Fatalf("%s connection through nftproxy: got %v, want pod-1", fam, r)
		}
		flows[fam] = f
	}
	e.stop()
	if err := e.lab.NftApply(takeoverIPv4); err != nil {
		t.Fatal(err)
	}
	if out, err := e.lab.Node.Run(daemonBinary, "cleanup"); err != nil {
		t.Fatalf("nftproxy cleanup: %v\n%s", err, out)
	}
	if r := flows["IPv4"].Probe(e.ctx); r.Outcome != lab.Replied || r.Reply.Pod != "pod-1" {
		t.Errorf("IPv4 connection after the cleanup, another table tracking IPv4: got %v, want pod-1 still answering", r)
	}
	if r := flows["IPv6"].Probe(e.ctx); r.Outcome == lab.Replied {
		t.Errorf("IPv6 connection after the cleanup, no table tracking IPv6: got %v, want it broken (if the kernel keeps translating now, deploy/MIGRATION.md's rollback step 2 says too much)", r)
	}
}
