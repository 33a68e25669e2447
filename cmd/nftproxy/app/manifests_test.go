package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// render on a directory that cannot be read fails, instead of printing an empty ruleset that
// an operator would apply.
func TestRenderMissingDirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexistent")
	code, out, errOut := run("render", "--manifests", missing, "--node-name", "node-a")
	if code != 1 || !strings.Contains(errOut, "read manifest directory") || strings.Contains(out, "table ") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1, no ruleset, an error naming the directory", code, out, errOut)
	}
	empty := t.TempDir()
	if code, out, errOut := run("render", "--manifests", empty, "--node-name", "node-a"); code != 0 || !strings.Contains(out, "table ip nftproxy {") {
		t.Fatalf("empty directory: exit %d, stderr %q; want 0 and an empty ruleset (no Services)", code, errOut)
	}
}

// Services the API server would refuse are listed by render as rejected, with the reason; an
// endpoint on a special address is listed as left out; the file's other objects are served.
func TestRenderListsRefusedObjects(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"svc.yaml": `apiVersion: v1
kind: Service
metadata: {name: "a/b", namespace: default}
spec: {clusterIP: 198.19.0.51, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: "nul\0", namespace: default}
spec: {clusterIP: 198.19.0.53, ports: [{name: http, port: 80}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {clusterIP: 198.19.0.52, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 80}]
endpoints: [{addresses: [169.254.169.254]}, {addresses: [198.18.128.11]}]
`,
		"big.yaml": "# " + strings.Repeat("x", 2500) + "\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := run("render", "--manifests", dir, "--node-name", "node-a", "--manifest-max-file-size", "2000")
	if code != 0 {
		t.Fatalf("render exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"# rejected service default/a/b (APIValidation): service default/a/b: svc.yaml document 1: the API server would refuse it: metadata.name",
		"# left out: svc.yaml document 4: EndpointSlice default/web-1: endpoint 0 dropped",
		`# rejected service default/nul\x00 (APIValidation)`,
		"cloud metadata address",
		"# skipped file: big.yaml: file is larger than the limit of 2000 bytes",
		"198.19.0.52", "198.18.128.11",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render output lacks %q", want)
		}
	}
	if strings.ContainsRune(out, 0) {
		t.Error("render output holds a NUL byte; want it escaped (nft -f stops reading there)")
	}
	for _, unwanted := range []string{"198.19.0.51", "198.19.0.53", "169.254.169.254 "} {
		if strings.Contains(strings.Join(ruleLines(out), "\n"), unwanted) {
			t.Errorf("ruleset programs %q", unwanted)
		}
	}
}

// render applies --max-service-cost as run's sync loop does: a Service over it is listed as
// rejected with CostLimit, its cost and the limit, and has no rules; the one beside it has.
func TestRenderAppliesTheCostBound(t *testing.T) {
	dir := t.TempDir()
	var eps []string
	for i := 0; i < 30; i++ {
		eps = append(eps, fmt.Sprintf("{addresses: [198.18.128.%d]}", 10+i))
	}
	content := `apiVersion: v1
kind: Service
metadata: {name: wide, namespace: default}
spec: {clusterIP: 198.19.0.51, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: wide-1, namespace: default, labels: {kubernetes.io/service-name: wide}}
addressType: IPv4
ports: [{name: http, port: 80}]
endpoints: [` + strings.Join(eps, ", ") + `]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec: {clusterIP: 198.19.0.52, ports: [{name: http, port: 80}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 80}]
endpoints: [{addresses: [198.18.129.11]}]
`
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("render", "--manifests", dir, "--node-name", "node-a", "--max-service-cost", "40")
	if code != 0 {
		t.Fatalf("render exit %d: %s", code, errOut)
	}
	if want := "# rejected service default/wide (CostLimit): service default/wide: its rules would cost the kernel "; !strings.Contains(out, want) || !strings.Contains(out, "over the limit of 40 (--max-service-cost)") {
		t.Errorf("render output lacks %q with the limit:\n%s", want, out)
	}
	rules := strings.Join(ruleLines(out), "\n")
	if strings.Contains(rules, "198.19.0.51") || !strings.Contains(rules, "198.19.0.52") {
		t.Errorf("ruleset programs wide: %v, web: %v; want web only", strings.Contains(rules, "198.19.0.51"), strings.Contains(rules, "198.19.0.52"))
	}
	// Without the bound, wide is rendered.
	if _, out, _ := run("render", "--manifests", dir, "--node-name", "node-a", "--max-service-cost", "0"); !strings.Contains(strings.Join(ruleLines(out), "\n"), "198.19.0.51") {
		t.Errorf("render with --max-service-cost 0 left wide out")
	}
}

// ruleLines drops render's comment header.
func ruleLines(out string) []string {
	var rules []string
	for _, l := range strings.Split(out, "\n") {
		if !strings.HasPrefix(l, "#") {
			rules = append(rules, l)
		}
	}
	return rules
}

// The manifest source's failure reaches /healthz (FailingSince) and the metrics, and it is not
// ready (nothing is synced) until its directory has been read once.
func TestManifestSourceFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "later")
	reg := prometheus.NewPedanticRegistry()
	sm, err := metrics.NewSource(reg, manifestSourceLabel)
	if err != nil {
		t.Fatal(err)
	}
	var o Options
	if err := parseFlags("run", &o, runFlags, []string{"--manifests", dir, "--node-name", "node-a"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	src, err := newSource(&o, logr.Discard(), nil, sm, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	tracker := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	notified := make(chan struct{}, 100)
	go func() { done <- src.Run(ctx, tracker, func() { notified <- struct{}{} }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("source returned %v; want nil after cancel", err)
		}
	}()
	up := func() string {
		var b strings.Builder
		fams, _ := reg.Gather()
		for _, f := range fams {
			if f.GetName() == metrics.SourceUp {
				fmt.Fprint(&b, f.GetMetric()[0].GetGauge().GetValue())
			}
		}
		return b.String()
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		for i := 0; i < 200 && !cond(); i++ {
			time.Sleep(25 * time.Millisecond)
		}
		if !cond() {
			t.Fatalf("not %s within 5s", what)
		}
	}
	waitUntil("failing", func() bool { return !src.FailingSince().IsZero() && up() == "0" })
	if src.Ready() {
		t.Fatal("ready before the directory was ever read; want not ready (nothing may be synced)")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	waitUntil("back", func() bool { return src.FailingSince().IsZero() && up() == "1" && src.Ready() })
}
