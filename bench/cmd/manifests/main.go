// Command manifests writes the seeded bench workload (bench/workload: N Services × E endpoints)
// as one manifest file of JSON documents, with its Node, for manifest-mode measurements:
//
//	go run ./bench/cmd/manifests -services 10000 -out DIR
//	/usr/bin/time -v nftproxy run --once --manifests DIR --node-name bench-node --service-node-port-range 30000-60000
//
// The Services are the API objects bench/peers creates (bench/workload.ServiceObject and
// SliceObject), so both modes are measured on the same objects.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nftproxy/nftproxy/bench/workload"
)

func main() {
	services := flag.Int("services", 10000, "number of Services")
	endpoints := flag.Int("endpoints", 10, "endpoints per Service port")
	seed := flag.Int64("seed", 1, "workload seed")
	out := flag.String("out", "", "directory to write workload.yaml into (created)")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "manifests: -out DIR is required")
		os.Exit(2)
	}
	if err := write(*out, *services, *endpoints, *seed); err != nil {
		fmt.Fprintln(os.Stderr, "manifests:", err)
		os.Exit(1)
	}
}

func write(dir string, services, endpoints int, seed int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(dir, "workload.yaml")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	wl := workload.Generate(workload.DefaultSpec(services, endpoints, seed))
	if err := wl.WriteManifest(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d Services, node %s, %d bytes\n", path, len(wl.Services), wl.Node.Name, st.Size())
	return nil
}
