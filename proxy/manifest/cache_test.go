package manifest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/proxy/model"
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

// TestCacheReusesSettledFiles: a full reload does not decode a settled file that has not
// changed (its objects, Services included, are the very objects of the last load), decodes again
// a file that changed, and forgets a file removed.
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
	if first.EndpointSlices[0] != second.EndpointSlices[0] || cache.decoded != 0 {
		t.Errorf("the unchanged files were decoded again (%d decoded)", cache.decoded)
	}
	if len(second.Services) != 2 || first.Services[0] != second.Services[0] || first.Services[1] != second.Services[1] {
		t.Errorf("Services of the unchanged files: got %v, want the objects of the first load", second.Services)
	}

	writeFiles(t, dir, map[string]string{"web.yaml": cacheService + "---\n" + cacheSlice[:len(cacheSlice)-len("11]}]\n")] + "12]}]\n"})
	if err := os.Remove(filepath.Join(dir, "other.yaml")); err != nil {
		t.Fatal(err)
	}
	changed := load()
	if got := changed.EndpointSlices[0].Endpoints[0].Addr.String(); got != "198.18.128.12" {
		t.Errorf("after the file changed: endpoint %s, want 198.18.128.12", got)
	}
	if len(changed.Services) != 1 || len(cache.files) != 1 {
		t.Errorf("after other.yaml was removed: %d Services, %d cached files; want 1 and 1", len(changed.Services), len(cache.files))
	}
}

// TestCacheWaitsForFilesToSettle: a file written within settleTime of a full load is decoded
// again at the next full load (a write within the timestamps' granularity would not change
// them).
func TestCacheWaitsForFilesToSettle(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"web.yaml": cacheService + "---\n" + cacheSlice})
	cache := newFileCache()
	a, _ := Loader{}.load(dir, cache)
	b, _ := Loader{}.load(dir, cache)
	if a.EndpointSlices[0] == b.EndpointSlices[0] || cache.decoded != 1 {
		t.Errorf("a file written just now was reused by a full load (%d files decoded)", cache.decoded)
	}
}

// TestReloadOfNamedFiles: a reload of the files inotify named decodes those files only, even
// when the others were written just now (a write to them would have been named too), drops a
// named file that is gone, places a new one in name order, and keeps reporting a named file
// that failed (so the Feeder keeps its last good objects) until it is named again and loads.
func TestReloadOfNamedFiles(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{}
	for i := range 20 {
		files[fmt.Sprintf("s%02d.yaml", i)] = strings.ReplaceAll(cacheSlice, "web-1", fmt.Sprintf("web-%02d", i))
	}
	writeFiles(t, dir, files)
	cache := newFileCache()
	first, errs := Loader{}.load(dir, cache)
	if len(errs) != 0 || len(first.EndpointSlices) != 20 {
		t.Fatalf("full load: %v, %d slices; want 20", errs, len(first.EndpointSlices))
	}
	slice := func(o Objects, name string) *model.EndpointSlice {
		for _, s := range o.EndpointSlices {
			if s.Name == name {
				return s
			}
		}
		return nil
	}

	writeFiles(t, dir, map[string]string{"s07.yaml": strings.ReplaceAll(files["s07.yaml"], "198.18.128.11", "198.18.128.77"),
		"a-new.yaml": strings.ReplaceAll(cacheSlice, "web-1", "web-new")})
	if err := os.Remove(filepath.Join(dir, "s03.yaml")); err != nil {
		t.Fatal(err)
	}
	next, errs := Loader{}.loadChanged(dir, cache, map[string]bool{"s07.yaml": true, "a-new.yaml": true, "s03.yaml": true, ".tmp-x": true})
	if len(errs) != 0 || cache.decoded != 2 {
		t.Fatalf("reload of 3 named files: %v, %d decoded; want no error and 2 decoded (one named file is gone)", errs, cache.decoded)
	}
	if got := slice(next, "web-07").Endpoints[0].Addr.String(); got != "198.18.128.77" {
		t.Errorf("changed file: endpoint %s, want 198.18.128.77", got)
	}
	if slice(next, "web-03") != nil || next.EndpointSlices[0].Name != "web-new" || len(next.EndpointSlices) != 20 {
		t.Errorf("removed and added files: got %v", refs(next))
	}
	for i := range 20 {
		name := fmt.Sprintf("web-%02d", i)
		if i != 3 && i != 7 && slice(next, name) != slice(first, name) {
			t.Errorf("%s was decoded again although its file was not named", name)
		}
	}

	writeFiles(t, dir, map[string]string{"s05.yaml": "kind: [half written"})
	_, errs = Loader{}.loadChanged(dir, cache, map[string]bool{"s05.yaml": true})
	if len(errs) != 1 || errs[0].File != "s05.yaml" {
		t.Fatalf("half-written file: errors %v, want one for s05.yaml", errs)
	}
	_, errs = Loader{}.loadChanged(dir, cache, map[string]bool{"s06.yaml": true})
	if len(errs) != 1 || errs[0].File != "s05.yaml" {
		t.Fatalf("reload of another file: errors %v, want s05.yaml still failing", errs)
	}
	writeFiles(t, dir, map[string]string{"s05.yaml": files["s05.yaml"]})
	last, errs := Loader{}.loadChanged(dir, cache, map[string]bool{"s05.yaml": true})
	if len(errs) != 0 || slice(last, "web-05") == nil {
		t.Fatalf("s05.yaml fixed: errors %v", errs)
	}
}
