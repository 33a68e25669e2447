package manifest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/test/fixture"
)

// writeWorkload writes the bench workload of n Services × 10 endpoints as bench/cmd/manifests
// does (the Node, then each Service and its EndpointSlice, one JSON document each), or the
// same documents as YAML.
func writeWorkload(b *testing.B, dir string, n int, asYAML bool) int64 {
	path := filepath.Join(dir, "workload.yaml")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	w := bufio.NewWriter(f)
	write := func(objs ...any) {
		if !asYAML {
			if err := fixture.Write(w, objs...); err != nil {
				b.Fatal(err)
			}
			return
		}
		for _, o := range objs {
			y, err := yaml.Marshal(o)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(w, "---\n%s", y)
		}
	}
	wl := workload.Generate(workload.DefaultSpec(n, 10, 1))
	write(wl.NodeObject())
	trigger := time.Unix(1_800_000_000, 0)
	for _, s := range wl.Services {
		write(workload.ServiceObject(s), workload.SliceObject(s, trigger))
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

// BenchmarkLoad: a full load of the bench workload at 10,000 Services × 10 endpoints (one
// 17 MB file of 20,001 documents, what `run --once` reads in manifest mode), written as JSON
// (bench/cmd/manifests) or as YAML. "json+copy" keeps the file's last good copy (run with
// --state-dir), written anew at every load: a restart after the file changed.
//
//	go test -run - -bench BenchmarkLoad -benchtime 10x -count 5 ./proxy/manifest/
func BenchmarkLoad(b *testing.B) {
	for _, c := range []struct {
		name         string
		asYAML, copy bool
	}{{"json", false, false}, {"yaml", true, false}, {"json+copy", false, true}} {
		asYAML := c.asYAML
		b.Run(c.name, func(b *testing.B) {
			const n = 10000
			dir := b.TempDir()
			b.SetBytes(writeWorkload(b, dir, n, asYAML))
			b.ReportAllocs()
			l := Loader{}
			if c.copy {
				l.LastGoodDir = b.TempDir()
			}
			for b.Loop() {
				if c.copy {
					os.RemoveAll(l.LastGoodDir) // the copy is not current: written again
				}
				objs, errs := l.Load(dir)
				if len(errs) > 0 || len(objs.Services) != n || len(objs.EndpointSlices) != n {
					b.Fatalf("loaded %d Services, %d slices, errors %v", len(objs.Services), len(objs.EndpointSlices), errs)
				}
			}
		})
	}
}
