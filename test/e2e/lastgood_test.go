package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// Manifest mode never loses Services to a bad read (the file source's last good state).

// TestDaemonRestartKeepsServicesOfABadFile: a file that cannot be decoded when the daemon starts
// (left half-written by a writer, or broken while the daemon was down) serves the Services of
// its last good copy in --state-dir; the daemon says so in its log and metrics. It used to start
// without them: the restart deleted the Services, with /healthz 200 and source_up 1.
func TestDaemonRestartKeepsServicesOfABadFile(t *testing.T) {
	t.Parallel()
	web := fixture.Service{
		Name:       "web",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(55)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1),
	}
	api := fixture.Service{
		Name:       "api",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(56)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080}},
		Endpoints:  fixture.Pods(1),
	}
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{lab.Port(8080)}}, web, api)
	const metricsAddr = "127.0.0.1:10249"
	e.flags = []string{"--metrics-bind-address", metricsAddr, "--state-dir", t.TempDir()}
	e.start(web, api)
	e.waitMetric(metricsAddr, `nftproxy_source_up{source="manifests"} 1`)
	e.stop()

	// web.yaml as an in-place writer leaves it when stopped halfway: cut inside a document.
	full := web.YAML()
	if err := os.WriteFile(filepath.Join(e.dir, web.File()), []byte(full[:len(full)/2]+"\n  bogus: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.start()
	e.waitSynced(metricsAddr)
	rs := e.ruleset()
	for _, s := range []fixture.Service{web, api} {
		if !strings.Contains(rs, `"`+s.Key()) {
			t.Errorf("after a restart with web.yaml broken, %s is not programmed:\n%s", s.Key(), rs)
		}
	}
	addr := hostPort(lab.ClusterIPv4(55), 80)
	want := replied(podNames(1), 8080, netip.MustParseAddr(lab.PodGatewayV4))
	want.check(t, "tcp "+addr+" after the restart with web.yaml broken", e.lab.Client(1).Dial(e.ctx, "tcp", addr))
	e.waitLog("serving the objects of its last good copy")
	e.waitMetric(metricsAddr, `nftproxy_source_up{source="manifests"} 0`)
	e.waitMetric(metricsAddr, `nftproxy_source_last_good_loads_total{source="manifests"} 1`)
	e.waitMetric(metricsAddr, `nftproxy_source_bad_files{source="manifests"} 1`)

	// Fixed: loaded, and the source is up again.
	e.write(web)
	e.waitMetric(metricsAddr, `nftproxy_source_up{source="manifests"} 1`)
	e.waitMetric(metricsAddr, `nftproxy_source_bad_files{source="manifests"} 0`)
}

// TestDaemonNodeManifestRemoved: removing the Node manifest while the daemon runs keeps the node
// ports working on the last Node's addresses, with a warning and nftproxy_node_object_missing 1
// (it used to stop every node port, silently).
func TestDaemonNodeManifestRemoved(t *testing.T) {
	t.Parallel()
	np := fixture.Service{
		Name: "np", Type: "NodePort",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(57)},
		Ports:      []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80, Target: 8080, NodePort: 30557}},
		Endpoints:  fixture.Pods(1),
	}
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{lab.Port(8080)}}, np)
	const metricsAddr = "127.0.0.1:10249"
	e.flags = []string{"--metrics-bind-address", metricsAddr}
	e.start(np)
	addr := hostPort(netip.MustParseAddr(lab.NodeIPv4), 30557)
	want := replied(podNames(1), 8080, netip.MustParseAddr(lab.PodGatewayV4))
	want.check(t, "tcp "+addr+" with the Node manifest", e.lab.Client(1).Dial(e.ctx, "tcp", addr))

	if err := os.Remove(filepath.Join(e.dir, "node.yaml")); err != nil {
		t.Fatal(err)
	}
	// Give a wrong daemon time to sync the loss (it reloads within 100 ms, syncs within 50 ms).
	time.Sleep(time.Second)
	want.check(t, "tcp "+addr+" after the Node manifest was removed", e.lab.Client(1).Dial(e.ctx, "tcp", addr))
	e.waitLog("no longer in the manifests")
	e.waitMetric(metricsAddr, `nftproxy_node_object_missing 1`)

	e.writeFile("node.yaml", fixture.LabNode().YAML())
	e.waitMetric(metricsAddr, `nftproxy_node_object_missing 0`)
}

var lastSync = regexp.MustCompile(`(?m)^nftproxy_last_sync_timestamp_seconds [1-9]`)

// waitSynced waits (bounded) until the daemon has completed a sync.
func (e *env) waitSynced(addr string) {
	e.t.Helper()
	tier.Until(e.t, e.ctx, programTimeout, pollInterval, "a completed sync", func() (bool, string) {
		r, err := tier.Get(e.ctx, e.lab.Node, "http://"+addr+"/metrics")
		if err != nil {
			return false, err.Error()
		}
		return lastSync.MatchString(r.Body), r.Body
	})
}
