package manifest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// churnDir writes the soak's churn layout: n Services, 100 to a file, and one EndpointSlice
// file per Service.
func churnDir(b *testing.B, n int) string {
	dir := b.TempDir()
	for f := 0; f*100 < n; f++ {
		var s strings.Builder
		for i := f*100 + 1; i <= min(n, (f+1)*100); i++ {
			fmt.Fprintf(&s, "apiVersion: v1\nkind: Service\nmetadata: {name: svc-%05d, namespace: churn}\nspec:\n  clusterIP: 198.19.%d.%d\n  ports: [{name: http, port: 80}]\n---\n", i, i/250, 1+i%250)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("svc-%03d.yaml", f)), []byte(s.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	for i := 1; i <= n; i++ {
		writeChurnSlice(b, dir, i, 0)
	}
	return dir
}

func writeChurnSlice(b *testing.B, dir string, i, v int) {
	body := fmt.Sprintf("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: svc-%05d-1, namespace: churn, labels: {kubernetes.io/service-name: svc-%05d}}\naddressType: IPv4\nports: [{name: http, port: 80}]\nendpoints: [{addresses: [198.18.128.%d]}, {addresses: [198.18.129.%d]}]\n", i, i, 1+(i+v)%200, 1+(i+v+7)%200)
	tmp := filepath.Join(dir, fmt.Sprintf(".svc-%05d.tmp", i))
	if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, fmt.Sprintf("slice-%05d.yaml", i))); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReloadChurn: one Watcher reload of a 10k-Service directory (the soak's churn layout)
// after 500 EndpointSlice files were rewritten (half a second of a 1000/s churn): "full" lists
// and stats the directory as a reload did before inotify's names were used, "named" decodes
// the named files alone; then Feed. "named+copies" also keeps each file's last good copy (run
// with --state-dir), written by the Watcher's copier beside the reloads as in the daemon.
func BenchmarkReloadChurn(b *testing.B) {
	for _, c := range []struct {
		name          string
		named, copies bool
	}{{"full", false, false}, {"named", true, false}, {"named+copies", true, true}} {
		named := c.named
		b.Run(c.name, func(b *testing.B) {
			const n, rewrites = 10000, 500
			dir := churnDir(b, n)
			l := Loader{}
			if c.copies {
				l.LastGoodDir = b.TempDir()
			}
			cache := newFileCache()
			cache.now = func() time.Time { return time.Now().Add(2 * settleTime) } // all settled
			if c.copies {
				cache.copier = newCopier(l.copies(), logr.Discard())
				ctx, cancel := context.WithCancel(context.Background())
				copied := make(chan struct{})
				go func() { cache.copier.run(ctx); close(copied) }()
				defer func() { cancel(); <-copied }()
			}
			f := NewFeeder(model.NewTracker(model.TrackerConfig{NodeName: "node-1"}))
			objs, errs := l.load(dir, cache)
			f.Feed(objs, errs)
			var load, feed time.Duration
			for v := 1; b.Loop(); v++ {
				b.StopTimer()
				changed := map[string]bool{}
				for j := range rewrites {
					i := 1 + (v*rewrites+j)%n
					writeChurnSlice(b, dir, i, v)
					changed[fmt.Sprintf("slice-%05d.yaml", i)] = true
				}
				b.StartTimer()
				t0 := time.Now()
				if named {
					objs, errs = l.loadChanged(dir, cache, changed)
				} else {
					objs, errs = l.load(dir, cache)
				}
				t1 := time.Now()
				f.Feed(objs, errs)
				load += t1.Sub(t0)
				feed += time.Since(t1)
			}
			b.ReportMetric(float64(load.Milliseconds())/float64(b.N), "load-ms/op")
			b.ReportMetric(float64(feed.Milliseconds())/float64(b.N), "feed-ms/op")
		})
	}
}
