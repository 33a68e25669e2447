package manifest

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

const (
	cacheService = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  type: NodePort
  clusterIP: 198.19.0.10
  ports: [{name: http, port: 80, targetPort: 8080}]
`
	cacheSlice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [198.18.128.11]}]
`
)

// TestCacheReusesSettledFiles: a reload does not decode a file that has not changed (its
// EndpointSlice is the very object of the last load), hands out Services as fresh copies (the
// node-port assigner writes into them), and decodes again a file that changed, while a file
// removed is forgotten.
func TestCacheReusesSettledFiles(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"web.yaml": cacheService + "---\n" + cacheSlice,
		"other.yaml": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"other","namespace":"default"},"spec":{"clusterIP":"198.19.0.11","ports":[{"port":80}]}}`})
	cache := newFileCache()
	cache.now = func() time.Time { return time.Now().Add(2 * settleTime) } // the files have settled
	load := func() Objects {
		t.Helper()
		objs, errs := Loader{}.load(dir, cache)
		if len(errs) != 0 || len(objs.EndpointSlices) != 1 {
			t.Fatalf("load: %v, %d slices", errs, len(objs.EndpointSlices))
		}
		return objs
	}
	first := load()
	second := load()
	if first.EndpointSlices[0] != second.EndpointSlices[0] {
		t.Error("the unchanged file was decoded again: its EndpointSlice is a new object")
	}
	if len(second.Services) != 2 || first.Services[0] == second.Services[0] || !reflect.DeepEqual(first.Services[0], second.Services[0]) {
		t.Errorf("Services of the unchanged file: got %v, want 2 equal copies, not the same objects", second.Services)
	}
	// What the node-port assigner does to the Services it is given.
	for _, s := range second.Services {
		s.Spec.Ports[0].NodePort = 30080
		s.Annotations = map[string]string{"nftproxy.io/node-port-ranges": "x=1-2"}
	}
	for _, s := range load().Services {
		if s.Spec.Ports[0].NodePort != 0 || s.Annotations != nil {
			t.Errorf("%s: a reload hands out what the assigner wrote last time: %+v", s.Name, s.Spec.Ports[0])
		}
	}

	writeFiles(t, dir, map[string]string{"web.yaml": cacheService + "---\n" + cacheSlice[:len(cacheSlice)-len("11]}]\n")] + "12]}]\n"})
	if err := os.Remove(filepath.Join(dir, "other.yaml")); err != nil {
		t.Fatal(err)
	}
	changed := load()
	if got := changed.EndpointSlices[0].Endpoints[0].Addresses[0]; got != "198.18.128.12" {
		t.Errorf("after the file changed: endpoint %s, want 198.18.128.12", got)
	}
	if len(changed.Services) != 1 || len(cache.files) != 1 {
		t.Errorf("after other.yaml was removed: %d Services, %d cached files; want 1 and 1", len(changed.Services), len(cache.files))
	}
}

// TestCacheWaitsForFilesToSettle: a file written within settleTime of a load is decoded again
// at the next one (a write within the timestamps' granularity would not change them).
func TestCacheWaitsForFilesToSettle(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"web.yaml": cacheService + "---\n" + cacheSlice})
	cache := newFileCache()
	a, _ := Loader{}.load(dir, cache)
	b, _ := Loader{}.load(dir, cache)
	if a.EndpointSlices[0] == b.EndpointSlices[0] || len(cache.files) != 0 {
		t.Errorf("a file written just now was cached (%d files)", len(cache.files))
	}
}
