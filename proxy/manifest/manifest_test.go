package manifest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/model"
)

const goodYAML = `
# a comment-only document comes first
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  clusterIP: 10.96.0.10
  ports:
  - name: http
    port: 80
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  labels:
    kubernetes.io/service-name: web
addressType: IPv4
ports:
- name: http
  port: 80
endpoints:
- addresses: ["10.244.0.1"]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
---
`

const listJSON = `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "dns", "namespace": "kube-system"},
   "spec": {"clusterIPs": ["10.96.0.53", "fd00:96::53"], "ports": [{"name": "dns", "protocol": "UDP", "port": 53, "targetPort": 5353}]}},
  {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
   "status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}
]}`

const badYAML = `
apiVersion: v1
kind: Service
metadata:
  name: lost
spec:
  clusterIP: 10.96.0.20
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata:
  name: typo
spec:
  ports: [{port: 80, targetport: 8080}]
`

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func refs(objs Objects) []string {
	var out []string
	for r, f := range objs.From {
		out = append(out, f+": "+r.String())
	}
	sort.Strings(out)
	return out
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"a-good.yaml": goodYAML, "b-list.json": listJSON, "c-bad.yml": badYAML,
		"d-dup.yaml": "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n",
		"notes.txt":  "not a manifest", ".hidden.yaml": "garbage: [",
	})
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	objs, errs := Load(dir)

	t.Run("objects", func(t *testing.T) {
		want := []string{"a-good.yaml: EndpointSlice default/web-1", "a-good.yaml: Service default/web",
			"b-list.json: Node n1", "b-list.json: Service kube-system/dns"}
		if got := refs(objs); !reflect.DeepEqual(got, want) {
			t.Fatalf("loaded = %v; want %v", got, want)
		}
	})
	t.Run("skipped", func(t *testing.T) {
		want := []Skipped{{File: "a-good.yaml", Document: 4, APIVersion: "apps/v1", Kind: "Deployment", Name: "web"}}
		if !reflect.DeepEqual(objs.Skipped, want) {
			t.Fatalf("skipped = %+v; want %+v", objs.Skipped, want)
		}
	})
	t.Run("errors", func(t *testing.T) {
		if len(errs) != 2 {
			t.Fatalf("errors = %v; want 2 (bad file, duplicate node)", errs)
		}
		if e := errs[0]; e.File != "c-bad.yml" || e.Document != 2 || !strings.Contains(e.Error(), `unknown field "spec.ports[0].targetport"`) {
			t.Fatalf("error = %q (file %s doc %d); want c-bad.yml document 2 naming the unknown field", e, e.File, e.Document)
		}
		if e := errs[1]; e.File != "d-dup.yaml" || !strings.Contains(e.Error(), "Node n1 is also defined in b-list.json") {
			t.Fatalf("error = %q; want a duplicate Node n1 error for d-dup.yaml", e)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		var web, dns *corev1.Service
		for _, s := range objs.Services {
			switch s.Name {
			case "web":
				web = s
			case "dns":
				dns = s
			}
		}
		checks := []struct {
			name      string
			got, want any
		}{
			{"namespace", web.Namespace, "default"},
			{"type", web.Spec.Type, corev1.ServiceTypeClusterIP},
			{"clusterIPs", web.Spec.ClusterIPs, []string{"10.96.0.10"}},
			{"ipFamilies", dns.Spec.IPFamilies, []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}},
			{"dual stack clusterIP", dns.Spec.ClusterIP, "10.96.0.53"},
			{"protocol", web.Spec.Ports[0].Protocol, corev1.ProtocolTCP},
			{"targetPort", web.Spec.Ports[0].TargetPort, intstr.FromInt32(80)},
			{"explicit targetPort kept", dns.Spec.Ports[0].TargetPort, intstr.FromInt32(5353)},
			{"slice port protocol", objs.EndpointSlices[0].Ports[0].Protocol, model.TCP},
		}
		for _, c := range checks {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Errorf("%s = %v; want %v", c.name, c.got, c.want)
			}
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		_, errs := Load(filepath.Join(dir, "nope"))
		if len(errs) != 1 || errs[0].Document != 0 {
			t.Fatalf("errors = %v; want one whole-directory error", errs)
		}
	})
}

func TestLoadDocumentErrors(t *testing.T) {
	tests := []struct {
		name, content, inError string
		doc                    int
	}{
		{"bad yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: [\n", "", 1},
		{"no kind", "apiVersion: v1\nmetadata: {name: x}\n", "apiVersion and kind are required", 1},
		{"scalar", "---\n--- \njust a string\n", "not a Kubernetes object", 2},
		{"bad list item", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","spec":{"ports":"x"}}]}`,
			"List item 1", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"f.yaml": tc.content})
			objs, errs := Load(dir)
			if len(errs) != 1 || errs[0].Document != tc.doc || !strings.Contains(errs[0].Error(), tc.inError) {
				t.Fatalf("errors = %v; want one error for document %d containing %q", errs, tc.doc, tc.inError)
			}
			if len(objs.From) != 0 {
				t.Fatalf("loaded %v from a bad file; want nothing", refs(objs))
			}
		})
	}
}

func serviceNames(tr *model.Tracker) []string {
	var out []string
	for _, s := range tr.Snapshot().Sorted() {
		out = append(out, s.Key.String())
	}
	return out
}

func TestFeeder(t *testing.T) {
	dir := t.TempDir()
	tr := model.NewTracker(model.TrackerConfig{NodeName: "n1", Logger: logr.Discard()})
	f := NewFeeder(tr)
	feed := func() { f.Feed(Load(dir)) }

	writeFiles(t, dir, map[string]string{"a.yaml": goodYAML, "b.json": listJSON})
	feed()
	if got, want := serviceNames(tr), []string{"default/web", "kube-system/dns"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("services = %v; want %v", got, want)
	}
	if n := tr.Snapshot().Node; n == nil || n.Name != "n1" {
		t.Fatalf("node = %+v; want n1", n)
	}
	if eps := tr.Service(model.ServiceKey{Namespace: "default", Name: "web"}).Ports[0].Endpoints; len(eps) != 1 {
		t.Fatalf("web endpoints = %+v; want one", eps)
	}

	t.Run("broken file keeps last good objects", func(t *testing.T) {
		writeFiles(t, dir, map[string]string{"b.json": `{"apiVersion": "v1", "kind": "List", "items": [`})
		feed()
		if got, want := serviceNames(tr), []string{"default/web", "kube-system/dns"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("services = %v; want %v", got, want)
		}
	})
	t.Run("deleted file removes its objects", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, "b.json")); err != nil {
			t.Fatal(err)
		}
		feed()
		if got, want := serviceNames(tr), []string{"default/web"}; !reflect.DeepEqual(got, want) {
			t.Fatalf("services = %v; want %v", got, want)
		}
		if n := tr.Snapshot().Node; n != nil {
			t.Fatalf("node = %+v; want none", n)
		}
	})
}

func TestWatchSeesRewrite(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"svc.yaml": goodYAML})
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var loads [][]string
	changed := make(chan struct{}, 10)
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, dir, logr.Discard(), func(o Objects, _ []FileError) {
			mu.Lock()
			loads = append(loads, refs(o))
			mu.Unlock()
			changed <- struct{}{}
		})
	}()
	wait := func(what string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(5 * time.Second):
			t.Fatalf("no reload after %s within 5s", what)
		}
	}
	wait("start")
	writeFiles(t, dir, map[string]string{"svc.yaml": strings.ReplaceAll(goodYAML, "name: web\n", "name: api\n")})
	wait("rewrite")
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch returned %v; want nil after cancel", err)
	}
	mu.Lock()
	defer mu.Unlock()
	last := loads[len(loads)-1]
	if want := []string{"svc.yaml: EndpointSlice default/web-1", "svc.yaml: Service default/api"}; !reflect.DeepEqual(last, want) {
		t.Fatalf("last load = %v; want %v", last, want)
	}
	if len(loads) > 3 {
		t.Fatalf("%d loads for one rewrite; want the burst debounced", len(loads))
	}
}

// A directory that keeps changing faster than DebounceInterval is still reloaded, at least every
// MaxReloadDelay, instead of never (a generator rewriting files all the time, each write
// complete: renamed in; a file written in place without pause waits for MaxSettleWait, see
// TestWatchWaitsForFilesWrittenInPlace).
func TestWatchReloadsDuringSteadyChurn(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"svc.yaml": goodYAML})
	ctx, cancel := context.WithCancel(context.Background())
	reloads := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, dir, logr.Discard(), func(Objects, []FileError) { reloads <- struct{}{} })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v; want nil after cancel", err)
		}
	}()
	<-reloads // the initial load
	// Rewrite every 20 ms (well under DebounceInterval), never leaving a quiet gap, until two
	// reloads came. Debounce alone would never reload; how often the cap reloads is a figure
	// for bench/, not asserted here: a busy machine only delays the reloads. The limit is a
	// hang bound, many times MaxReloadDelay.
	limit := time.Now().Add(30 * MaxReloadDelay)
	n, got := 0, 0
	for got < 2 {
		if time.Now().After(limit) {
			t.Fatalf("%d reloads during %d rewrites over %v without a quiet gap; want 2: a steady churn starves the reload", got, n, 30*MaxReloadDelay)
		}
		n++
		renameFile(t, dir, "other.yaml", fmt.Sprintf("# rewrite %d\n", n))
		time.Sleep(20 * time.Millisecond)
		for more := true; more; {
			select {
			case <-reloads:
				got++
			default:
				more = false
			}
		}
	}
}
