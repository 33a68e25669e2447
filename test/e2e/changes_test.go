package e2e

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// spreadOnly probes addr n times from the client and requires every probe answered, by pods
// in want only, each of them at least once.
func (e *env) spreadOnly(t *testing.T, network, addr string, n int, want []string) {
	t.Helper()
	got := e.lab.Client(1).Spread(e.ctx, network, addr, n)
	if got.Outcomes[lab.Replied] != n {
		t.Errorf("%s %s x%d: got %v (errors %v), want %d replies from %v", network, addr, n, got, got.Errors, n, want)
	}
	for pod, c := range got.Pods {
		if !strings.HasPrefix(pod, "pod-") || !slices.Contains(want, pod) {
			t.Errorf("%s %s x%d: %s answered %d times, want only %v", network, addr, n, pod, c, want)
		}
	}
	for _, pod := range want {
		if got.Pods[pod] == 0 {
			t.Errorf("%s %s x%d: got %v, want every one of %v to answer", network, addr, n, got, want)
		}
	}
}

// TestEndpointChanges rewrites a Service's EndpointSlice while the daemon runs: traffic follows
// each change (endpoint removed, all removed, added back), and a Service turned invalid by a
// rewrite stops being served while its neighbour keeps answering.
func TestEndpointChanges(t *testing.T) {
	t.Parallel()
	svc := fixture.Service{
		Name:       "moving",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(20), lab.ClusterIPv6(20)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}, {Name: "dns", Protocol: "UDP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1, 2),
	}
	neighbour := fixture.Service{
		Name:        "neighbour",
		ClusterIPs:  []netip.Addr{lab.ClusterIPv4(21)},
		Ports:       []fixture.Port{{Name: "rtp", Protocol: "UDP", Port: rangeStart}},
		Annotations: map[string]string{"nftproxy.io/port-ranges": "rtp=16384-16393"},
		Endpoints:   fixture.Pods(2),
	}
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(8080), lab.PortRange(rangeStart, rangeEnd)}}, svc, neighbour)
	e.start(svc, neighbour)
	v4, v6 := hostPort(lab.ClusterIPv4(20), 80), hostPort(lab.ClusterIPv6(20), 80)
	const n = 30

	has := func(rs string, pods ...int) []bool {
		objs := objectsOf(rs, svc)
		var out []bool
		for _, n := range pods {
			out = append(out, strings.Contains(objs, lab.PodIPv4(n).String()+" ") || strings.Contains(objs, lab.PodIPv4(n).String()+":"))
		}
		return out
	}
	steps := []struct {
		name  string
		pods  []int
		ready func(rs string) bool
		want  []string // nil: no endpoints, refused
	}{
		{"both endpoints", []int{1, 2}, nil, podNames(1, 2)},
		{"pod-2 removed", []int{1}, func(rs string) bool { h := has(rs, 1, 2); return h[0] && !h[1] }, podNames(1)},
		{"every endpoint removed", []int{}, func(rs string) bool {
			h := has(rs, 1, 2)
			return !h[0] && !h[1] && containsKey(rs, svc)
		}, nil},
		{"both added back", []int{1, 2}, func(rs string) bool { h := has(rs, 1, 2); return h[0] && h[1] }, podNames(1, 2)},
	}
	for _, st := range steps {
		if st.ready != nil {
			svc.Endpoints = fixture.Pods(st.pods...)
			e.write(svc)
			e.waitFor(st.name, st.ready)
		}
		t.Run(st.name, func(t *testing.T) {
			for _, network := range []string{"tcp", "udp"} {
				for _, addr := range []string{v4, v6} {
					if st.want != nil {
						e.spreadOnly(t, network, addr, n, st.want)
						continue
					}
					if r := e.lab.Client(1).Dial(e.ctx, network, addr); r.Outcome != lab.Refused {
						t.Errorf("%s %s without endpoints: got %v, want %v", network, addr, r, lab.Refused)
					}
				}
			}
		})
	}

	// The neighbour becomes a range Service with a range ending before it starts: rejected, so
	// no longer programmed; "moving" is untouched. Fixed again, it comes back.
	rangeAddr := hostPort(lab.ClusterIPv4(21), rangeStart+3)
	neighbour.Annotations = map[string]string{"nftproxy.io/port-ranges": "rtp=16384-16000"}
	e.write(neighbour)
	e.waitFor("the invalid neighbour to go", func(rs string) bool { return !containsKey(rs, neighbour) })
	t.Run("invalid rewrite unprograms only that Service", func(t *testing.T) {
		e.spreadOnly(t, "tcp", v4, 10, podNames(1, 2))
		if r := e.lab.Client(1).Dial(e.ctx, "udp", hostPort(lab.ClusterIPv4(21), rangeStart)); r.Outcome != lab.Timeout {
			t.Errorf("rejected Service's ClusterIP: got %v, want %v (unallocated: dropped)", r, lab.Timeout)
		}
	})
	neighbour.Annotations = map[string]string{"nftproxy.io/port-ranges": "rtp=16384-16393"}
	e.write(neighbour)
	e.waitProgrammed(neighbour)
	t.Run("fixed Service served again", func(t *testing.T) {
		masq := netip.MustParseAddr(lab.PodGatewayV4)
		replied(podNames(2), rangeStart+3, masq).check(t, "udp "+rangeAddr, e.lab.Client(1).Dial(e.ctx, "udp", rangeAddr))
	})
}

// TestCleanupThenRun: `nftproxy cleanup` removes exactly the daemon's tables (service stops,
// another table stays), and a new `run` restores service.
func TestCleanupThenRun(t *testing.T) {
	t.Parallel()
	svc := fixture.Service{
		Name:       "web",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(30), lab.ClusterIPv6(30)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1),
	}
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{lab.Port(8080)}}, svc)
	if err := e.lab.NftApply("add table ip bystander\nadd chain ip bystander c\n"); err != nil {
		t.Fatal(err)
	}
	addr := hostPort(lab.ClusterIPv4(30), 80)
	masq := netip.MustParseAddr(lab.PodGatewayV4)
	want := replied(podNames(1), 8080, masq)

	e.start(svc)
	want.check(t, "tcp "+addr+" before cleanup", e.lab.Client(1).Dial(e.ctx, "tcp", addr))
	e.stop()

	if out, err := e.lab.Node.Run(daemonBinary, "cleanup"); err != nil {
		t.Fatalf("nftproxy cleanup: %v\n%s", err, out)
	}
	rs := e.ruleset()
	for _, table := range []string{"table ip nftproxy", "table ip6 nftproxy"} {
		if strings.Contains(rs, table) {
			t.Errorf("after cleanup the ruleset still has %q:\n%s", table, rs)
		}
	}
	if !strings.Contains(rs, "table ip bystander") {
		t.Errorf("cleanup removed another table; ruleset:\n%s\nwant table ip bystander kept", rs)
	}
	// Without rules the ClusterIP is routed to the node's gateway, which drops it.
	if r := e.lab.Client(1).Dial(e.ctx, "tcp", addr); r.Outcome != lab.Timeout {
		t.Errorf("tcp %s after cleanup: got %v, want %v", addr, r, lab.Timeout)
	}

	e.start(svc)
	want.check(t, "tcp "+addr+" after run", e.lab.Client(1).Dial(e.ctx, "tcp", addr))
	v6 := hostPort(lab.ClusterIPv6(30), 80)
	replied(podNames(1), 8080, netip.MustParseAddr(lab.PodGatewayV6)).check(t, "tcp "+v6+" after run", e.lab.Client(1).Dial(e.ctx, "tcp", v6))
}
