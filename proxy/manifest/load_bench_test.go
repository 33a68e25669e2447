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
// (bench/cmd/manifests) or as YAML.
//
//	go test -run - -bench BenchmarkLoad -benchtime 10x -count 5 ./proxy/manifest/
func BenchmarkLoad(b *testing.B) {
	for _, asYAML := range []bool{false, true} {
		b.Run(map[bool]string{false: "json", true: "yaml"}[asYAML], func(b *testing.B) {
			const n = 10000
			dir := b.TempDir()
			b.SetBytes(writeWorkload(b, dir, n, asYAML))
			b.ReportAllocs()
			for b.Loop() {
				objs, errs := Load(dir)
				if len(errs) > 0 || len(objs.Services) != n || len(objs.EndpointSlices) != n {
					b.Fatalf("loaded %d Services, %d slices, errors %v", len(objs.Services), len(objs.EndpointSlices), errs)
				}
			}
		})
	}
}
