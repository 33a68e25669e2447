package k8s

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// TestMigrationOverlapWithKubeProxy follows deploy/MIGRATION.md's steps 2 to 5 on a real
// kube-proxy (built from source; kubeProxyBinary: the newest release), in its nftables and
// iptables modes: nftproxy starts
// beside the running kube-proxy, kube-proxy stops (its rules stay, frozen), Services change,
// then kube-proxy's rules are removed. It checks what the guide says the overlap serves:
//   - the health-check node port of an externalTrafficPolicy=Local Service answers 200
//     throughout, every probe (the traffic's fail the test): kube-proxy's listener first,
//     nftproxy's (its rules redirect the port nobody holds) from the first probe after
//     kube-proxy exits, with no sync needed;
//   - with kube-proxy's frozen rules still in the kernel, a Service scaled to zero is refused
//     (kube-proxy's rules would send it to its removed endpoint) and a Service whose endpoint
//     changed reaches only the new one;
//   - both still hold once `nftproxy cleanup --kube-proxy` has removed kube-proxy's rules.
func TestMigrationOverlapWithKubeProxy(t *testing.T) {
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "iptables" && !hasIPTables() {
				t.Skip("needs the iptables binary (iptables-nft), as kube-proxy's iptables mode does")
			}
			overlap(t, mode)
		})
	}
}

func overlap(t *testing.T, mode string) {
	e, objs := setupEnv(t, deployDir, nil, lab.Options{Pods: 3})
	changed, scaled := httpService("changed", 50, 1, 2), httpService("scaled", 51, 1)
	e.createService(changed)
	e.createService(scaled)
	lb := httpService("lb-local", 52, 1)
	lb.LoadBalancerIPs = []netip.Addr{lab.LoadBalancerIPv4(52)}
	hcPort := e.createLocalLB(lb)
	steady := steadyService(55)
	e.createService(steady)

	kc := e.c.KubeconfigFor(t, e.lab.Node, e.c.Admin())
	kp, err := e.lab.StartInNode(e.ctx, kubeProxyBinary(t, e.c), "--proxy-mode", mode, "--kubeconfig", kc,
		"--hostname-override", fixture.NodeName, "--cluster-cidr", lab.PodCIDRv4+","+lab.PodCIDRv6,
		"--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256",
		"--conntrack-max-per-core=0", "--v=2")
	if err != nil {
		t.Fatal(err)
	}
	e.waitUntil("kube-proxy answering the health-check node port", func() (bool, string) {
		got := e.healthCheck(hcPort)
		return strings.Contains(got, " 200 "), got
	})
	for _, s := range []fixture.Service{changed, steady} {
		e.waitUntil("kube-proxy serving "+s.Name, func() (bool, string) {
			r := lab.Dial(e.ctx, e.lab.Client(1).NS, "tcp", vip(s))
			return r.Outcome == lab.Replied, r.String()
		})
	}
	tr := startTraffic(t, e, steady, hcPort, "1. kube-proxy alone")

	// Step 2: nftproxy beside the running kube-proxy.
	tr.setPhase("2. nftproxy starting beside kube-proxy")
	e.start(daemonArgs(t, objs, fixture.NodeName), true)
	for _, s := range []fixture.Service{changed, scaled, lb} {
		e.waitProgrammed(s)
	}
	for range 5 {
		if got := e.healthCheck(hcPort); !strings.Contains(got, " 200 ") {
			t.Errorf("health-check node port with both running: got %q, want 200 (kube-proxy's)", got)
		}
	}

	// Step 4: kube-proxy stops; the next probe of its health-check node port is redirected to
	// nftproxy's listener.
	tr.setPhase("4. kube-proxy stopped, its rules frozen")
	tr.exitResets()
	if err := kp.Stop(); err != nil {
		t.Logf("kube-proxy exit: %v", err)
	}
	notOK := 0
	for range 25 { // after kube-proxy's exit: a probe of it cannot be in flight any more
		if got := e.healthCheck(hcPort); !strings.Contains(got, " 200 ") {
			notOK++
			t.Errorf("%s mode: health-check node port once kube-proxy exited: got %q, want nftproxy's 200", mode, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("%s mode: health-check probes (every 20ms) not answered 200 right after kube-proxy exited: %d of 25", mode, notOK)

	// Services change while kube-proxy's rules are frozen.
	tr.setPhase("4. Services changed, kube-proxy's rules frozen")
	e.setEndpoints(changed, 3)
	e.setEndpoints(scaled)
	check := func(phase string) {
		t.Helper()
		e.waitUntil(phase+": scaled refused", func() (bool, string) {
			r := lab.Dial(e.ctx, e.lab.Client(1).NS, "tcp", vip(scaled))
			return r.Outcome == lab.Refused, r.String()
		})
		e.waitUntil(phase+": changed reaching pod-3", func() (bool, string) {
			r := lab.Dial(e.ctx, e.lab.Client(1).NS, "tcp", vip(changed))
			return r.Outcome == lab.Replied && r.Reply.Pod == "pod-3", r.String()
		})
		for _, src := range []struct {
			name string
			host *lab.Host
		}{{"client-1", e.lab.Client(1)}, {"pod-2", e.lab.Pod(2)}} {
			for i := 0; i < 10; i++ {
				if r := lab.Dial(e.ctx, src.host.NS, "tcp", vip(scaled)); r.Outcome != lab.Refused {
					t.Errorf("%s, %s mode: scaled from %s: got %v, want refused", phase, mode, src.name, r)
				}
				if r := lab.Dial(e.ctx, src.host.NS, "tcp", vip(changed)); r.Outcome != lab.Replied || r.Reply.Pod != "pod-3" {
					t.Errorf("%s, %s mode: changed from %s: got %v, want pod-3", phase, mode, src.name, r)
				}
			}
		}
	}
	check("kube-proxy's rules frozen")

	// Step 5: kube-proxy's rules removed as deploy/migrate's DaemonSet does.
	tr.setPhase("5. kube-proxy's rules removed")
	args := cleanupArgs(t, "cleanup-kube-proxy.yaml")
	out, err := e.lab.Node.Command(append([]string{"setpriv", "--bounding-set=-all,+net_admin", "--no-new-privs", "--", daemonBinary}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nftproxy %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	check("kube-proxy's rules removed")
	if got := e.healthCheck(hcPort); !strings.Contains(got, " 200 ") {
		t.Errorf("health-check node port after step 5: got %q, want 200", got)
	}
	tr.finish(t, mode+" mode, migration")
}

// TestRollbackToKubeProxy follows deploy/MIGRATION.md's rollback on a real kube-proxy, both
// modes: nftproxy serves, kube-proxy starts beside it (it binds the health-check node port,
// which nftproxy never holds, and answers it at once), nftproxy stops (it withdraws its
// redirect of the port first; its other rules stay), and nftproxy's tables are removed. A
// Service keeps answering at every step, and every health-check probe is answered 200 (the
// traffic's fail the test): nftproxy's, then kube-proxy's.
func TestRollbackToKubeProxy(t *testing.T) {
	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "iptables" && !hasIPTables() {
				t.Skip("needs the iptables binary (iptables-nft), as kube-proxy's iptables mode does")
			}
			rollback(t, mode)
		})
	}
}

func rollback(t *testing.T, mode string) {
	e, objs := setupEnv(t, deployDir, nil, lab.Options{Pods: 2})
	web := httpService("web", 53, 1, 2)
	e.createService(web)
	lb := httpService("lb-local", 54, 1)
	lb.LoadBalancerIPs = []netip.Addr{lab.LoadBalancerIPv4(54)}
	hcPort := e.createLocalLB(lb)
	steady := steadyService(55)
	e.createService(steady)
	e.start(daemonArgs(t, objs, fixture.NodeName), true)
	e.waitProgrammed(web)
	e.waitProgrammed(steady)
	e.waitUntil("nftproxy answering the health-check node port", func() (bool, string) {
		got := e.healthCheck(hcPort)
		return strings.Contains(got, " 200 "), got
	})
	served := func(phase string) {
		t.Helper()
		for i := 0; i < 10; i++ {
			if r := lab.Dial(e.ctx, e.lab.Client(1).NS, "tcp", vip(web)); r.Outcome != lab.Replied {
				t.Errorf("%s, %s mode: web: got %v, want a reply", phase, mode, r)
			}
		}
	}

	tr := startTraffic(t, e, steady, hcPort, "0. nftproxy alone")

	// 1. kube-proxy starts beside nftproxy and opens the health-check node port nobody holds.
	kc := e.c.KubeconfigFor(t, e.lab.Node, e.c.Admin())
	tr.setPhase("1. kube-proxy starting beside nftproxy")
	if _, err := e.lab.StartInNode(e.ctx, kubeProxyBinary(t, e.c), "--proxy-mode", mode, "--kubeconfig", kc,
		"--hostname-override", fixture.NodeName, "--cluster-cidr", lab.PodCIDRv4+","+lab.PodCIDRv6,
		"--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256",
		"--conntrack-max-per-core=0", "--v=2"); err != nil {
		t.Fatal(err)
	}
	e.waitUntil("kube-proxy listening on the health-check node port", func() (bool, string) {
		out, err := e.lab.Node.Run("ss", "-Htlnp", fmt.Sprintf("sport = :%d", hcPort))
		return err == nil && strings.Contains(out, "kube-proxy"), fmt.Sprint(out, err)
	})
	e.waitKubeProxySynced(steady)
	tr.setPhase("1. kube-proxy beside nftproxy")
	served("kube-proxy beside nftproxy")

	// 2. nftproxy stops: its redirect of the health-check node port goes first, then its
	// listener; kube-proxy answers the port from then on. Its other rules stay and serve.
	tr.setPhase("2. nftproxy stopped, its rules frozen")
	if err := e.daemon.Stop(); err != nil {
		t.Errorf("nftproxy exit: %v", err)
	}
	e.daemon = nil
	served("nftproxy stopped")
	for range 5 {
		if got := e.healthCheck(hcPort); !strings.Contains(got, " 200 ") {
			t.Errorf("%s mode: health-check node port once nftproxy stopped: got %q, want kube-proxy's 200", mode, got)
		}
	}

	// 3. nftproxy's tables removed as deploy/migrate's DaemonSet does.
	tr.setPhase("3. nftproxy's tables removed")
	args := cleanupArgs(t, "cleanup-nftproxy.yaml")
	out, err := e.lab.Node.Command(append([]string{"setpriv", "--bounding-set=-all,+net_admin", "--no-new-privs", "--", daemonBinary}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nftproxy %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	if rs := e.ruleset(); strings.Contains(rs, "table ip nftproxy") || strings.Contains(rs, "table ip6 nftproxy") {
		t.Errorf("nftproxy's tables left after the cleanup:\n%s", rs)
	}
	served("nftproxy's tables removed")
	for range 5 {
		if got := e.healthCheck(hcPort); !strings.Contains(got, " 200 ") {
			t.Errorf("%s mode: health-check node port after the cleanup: got %q, want kube-proxy's 200", mode, got)
		}
	}
	tr.finish(t, mode+" mode, rollback")
}
