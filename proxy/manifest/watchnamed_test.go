package manifest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
)

// watchLoads runs a Watcher on dir and returns a channel of its loads and a function that
// returns the "Loaded manifests" log lines so far; the Watcher stops with the test.
func watchLoads(t *testing.T, dir string) (<-chan Objects, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(_, args string) {
		if strings.Contains(args, `"Loaded manifests"`) {
			mu.Lock()
			lines = append(lines, args)
			mu.Unlock()
		}
	}, funcr.Options{Verbosity: 1})
	loads := make(chan Objects, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- (&Watcher{Dir: dir, Log: log, OnLoad: func(o Objects, _ []FileError) { loads <- o }}).Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v; want nil after cancel", err)
		}
	})
	return loads, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(lines)
	}
}

func nextLoad(t *testing.T, loads <-chan Objects, what string) Objects {
	t.Helper()
	select {
	case o := <-loads:
		return o
	case <-time.After(5 * time.Second):
		t.Fatalf("no reload after %s within 5s", what)
		return Objects{}
	}
}

// TestWatchReloadsNamedFilesOnly: after the first load, an atomic rewrite of one file of many
// (written through a temporary dot-file and renamed, as a config-management tool writes)
// reloads that file alone, however recently the others were written.
func TestWatchReloadsNamedFilesOnly(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{}
	for i := range 30 {
		files[fmt.Sprintf("s%02d.yaml", i)] = strings.ReplaceAll(cacheSlice, "web-1", fmt.Sprintf("web-%02d", i))
	}
	writeFiles(t, dir, files)
	loads, lines := watchLoads(t, dir)
	nextLoad(t, loads, "start")

	tmp := filepath.Join(dir, ".tmp-s11.yaml")
	if err := os.WriteFile(tmp, []byte(strings.ReplaceAll(files["s11.yaml"], "198.18.128.11", "198.18.128.99")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "s11.yaml")); err != nil {
		t.Fatal(err)
	}
	o := nextLoad(t, loads, "rewrite")
	for _, s := range o.EndpointSlices {
		if s.Name == "web-11" && s.Endpoints[0].Addr.String() != "198.18.128.99" {
			t.Errorf("web-11 after its rewrite: %v", s.Endpoints)
		}
	}
	all := lines()
	if len(all) != 2 {
		t.Fatalf("loads logged: %q; want the first and one reload", all)
	}
	if first := all[0]; !strings.Contains(first, `"reload"="full"`) || !strings.Contains(first, `"decodedFiles"=30`) {
		t.Errorf("first load: %s; want a full load of 30 files", first)
	}
	if last := all[1]; !strings.Contains(last, `"reload"="named files"`) || !strings.Contains(last, `"decodedFiles"=1 `) {
		t.Errorf("reload after one rewrite: %s; want the named file alone decoded", last)
	}
}

// TestWatchFollowsConfigMapSwap: a ConfigMap volume's files are symlinks through "..data", which
// the kubelet swaps to a new directory: no event names the files themselves, so the swap
// reloads the whole directory.
func TestWatchFollowsConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(v, svc string) {
		t.Helper()
		d := filepath.Join(dir, "..v"+v)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		writeFiles(t, d, map[string]string{"svc.yaml": strings.ReplaceAll(goodYAML, "name: web\n", "name: "+svc+"\n")})
		if err := os.Symlink("..v"+v, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("1", "web")
	if err := os.Symlink("..data/svc.yaml", filepath.Join(dir, "svc.yaml")); err != nil {
		t.Fatal(err)
	}
	loads, _ := watchLoads(t, dir)
	if o := nextLoad(t, loads, "start"); len(o.Services) != 1 || o.Services[0].Name != "web" {
		t.Fatalf("first load: %v", refs(o))
	}
	version("2", "api")
	if o := nextLoad(t, loads, "the ..data swap"); len(o.Services) != 1 || o.Services[0].Name != "api" {
		t.Fatalf("after the swap: %v; want Service default/api", refs(o))
	}
}
