package app

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/tier"
)

// pipelineDir holds a Node, a NodePort Service with an explicit node port, a younger one asking
// for the same node port (manifest mode's assigner refuses it: the Service is served without
// it) and a port-range Service asking for a shifted node-port block (refused too; it gets its
// identity block instead, as the cluster controller would write it).
const pipelineDir = `apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 198.18.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, creationTimestamp: "2025-01-01T00:00:00Z"}
spec: {type: NodePort, clusterIP: 198.19.0.61, ports: [{name: http, protocol: TCP, port: 80, nodePort: 30080}]}
---
apiVersion: v1
kind: Service
metadata: {name: late, namespace: default, creationTimestamp: "2025-01-02T00:00:00Z"}
spec: {type: NodePort, clusterIP: 198.19.0.62, ports: [{name: http, protocol: TCP, port: 80, nodePort: 30080}]}
---
apiVersion: v1
kind: Service
metadata:
  name: rtp
  namespace: default
  creationTimestamp: "2025-01-03T00:00:00Z"
  annotations: {nftproxy.io/port-ranges: "rtp=20000-20009", nftproxy.io/node-port-ranges: "rtp=21000-21009"}
spec: {type: NodePort, clusterIP: 198.19.0.63, ports: [{name: rtp, protocol: UDP, port: 20000}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 80}]
endpoints: [{addresses: [198.18.128.11]}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: late-1, namespace: default, labels: {kubernetes.io/service-name: late}}
addressType: IPv4
ports: [{name: http, protocol: TCP, port: 80}]
endpoints: [{addresses: [198.18.128.12]}]
`

// The three entry points of manifest mode (run's watcher, run --once, render) build the same
// model from one directory, node-port refusals included, and each makes those refusals visible:
// run and run --once log them and count them in nftproxy_invalid_services_total, render prints
// them. Before the shared pipeline the refusals were dropped by run and run --once (logged with
// no count) and render went its own way.
func TestManifestEntryPointsShareOnePipeline(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "all.yaml"), []byte(pipelineDir), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--manifests", dir, "--node-name", "node-a"}
	var o Options
	if err := parseFlags("run", &o, runFlags, args, io.Discard); err != nil {
		t.Fatal(err)
	}
	builders, err := o.builders()
	if err != nil {
		t.Fatal(err)
	}
	// daemon is what runCmd builds for both run and run --once: a tracker whose rejections
	// are counted, a node-port observer, a log.
	type daemon struct {
		tracker *model.Tracker
		reg     *prometheus.Registry
		pm      *metrics.Proxy
		am      *metrics.AllocatorMetrics
		log     *tier.Buffer
	}
	newDaemon := func() daemon {
		d := daemon{reg: prometheus.NewRegistry(), log: &tier.Buffer{}}
		if d.pm, err = metrics.NewProxy(d.reg, model.AllReasons()); err != nil {
			t.Fatal(err)
		}
		if d.am, err = metrics.NewAllocatorMetrics(d.reg); err != nil {
			t.Fatal(err)
		}
		guard, err := o.guard() // as runCmd: the block range decides which blocks are served
		if err != nil {
			t.Fatal(err)
		}
		d.tracker = newTracker(&o, guard, newLogger(0, d.log), d.pm, nil, func() {})
		return d
	}
	ruleset := func(snap model.Snapshot) string {
		var sb strings.Builder
		for _, b := range builders {
			sb.WriteString(nft.Render(nft.Canonical(b.Ruleset(snap.Node, snap.Sorted()))))
		}
		return sb.String()
	}

	// run --once.
	once := newDaemon()
	if err := loadOnce(&o, newLogger(0, once.log), once.tracker, once.am, once.pm); err != nil {
		t.Fatal(err)
	}

	// run: the manifest source's watcher, until its first load is fed.
	daemonRun := newDaemon()
	src, err := newSource(&o, newLogger(0, daemonRun.log), daemonRun.am, nil, daemonRun.pm)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	fed := make(chan struct{}, 100)
	go func() { done <- src.Run(ctx, daemonRun.tracker, func() { fed <- struct{}{} }) }()
	select {
	case <-fed:
	case <-time.After(10 * time.Second):
		t.Fatal("the run source fed nothing within 10s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run source: %v", err)
	}

	// render.
	code, out, errOut := run(append([]string{"render"}, args...)...)
	if code != 0 {
		t.Fatalf("render exit %d: %s", code, errOut)
	}

	want := once.tracker.Snapshot()
	if got := daemonRun.tracker.Snapshot(); !reflect.DeepEqual(got, want) {
		t.Errorf("run's model differs from run --once's:\nrun:  %+v\nonce: %+v", got.Sorted(), want.Sorted())
	}
	rules := ruleset(want)
	if got := strings.Join(ruleLines(out), "\n"); got != strings.Join(ruleLines(rules), "\n") {
		t.Errorf("render's ruleset differs from run --once's model:\nrender:\n%s\nonce:\n%s", got, rules)
	}
	// The refused node ports are not programmed, the rest of those Services is.
	if strings.Contains(rules, "21000") || !strings.Contains(rules, "198.19.0.62") || !strings.Contains(rules, "198.19.0.63") ||
		!strings.Contains(rules, `udp . 20000-20009 comment "default/rtp/udp/rtp"`) {
		t.Errorf("want the refused block 21000-21009 absent, the identity block 20000-20009 given instead and both refused "+
			"Services' cluster IPs served; ruleset:\n%s", rules)
	}

	for _, c := range []struct {
		service, port string
	}{{"default/late", "http"}, {"default/rtp", "rtp"}} {
		line := `# node port not assigned: Service ` + c.service + ` port "` + c.port + `"`
		if !strings.Contains(out, line) {
			t.Errorf("render output lacks %q", line)
		}
		for name, d := range map[string]daemon{"run": daemonRun, "run --once": once} {
			if l := d.log.String(); !strings.Contains(l, "node port not assigned") || !strings.Contains(l, `service="`+c.service+`"`) {
				t.Errorf("%s: log lacks the node-port refusal of %s:\n%s", name, c.service, l)
			}
		}
	}
	for name, d := range map[string]daemon{"run": daemonRun, "run --once": once} {
		if got := counterValue(t, d.reg, metrics.InvalidServices, "reason", model.ReasonNodePortNotAssigned); got != 2 {
			t.Errorf("%s: %s{reason=%q} = %v; want 2 (late's node port, rtp's block)", name, metrics.InvalidServices, model.ReasonNodePortNotAssigned, got)
		}
	}
}
