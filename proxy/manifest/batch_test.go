package manifest

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestManyDocumentsKeepOrderAndFirstError: documents are decoded in parallel batches; the
// objects still come out in file order and the error names the first bad document, also when
// it lies beyond the first batch.
func TestManyDocumentsKeepOrderAndFirstError(t *testing.T) {
	n := 3*decodeBatchSize + 7
	svc := func(i int) string {
		return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: s%d, namespace: default}\nspec:\n  clusterIP: 198.19.%d.%d\n  ports: [{name: p, protocol: TCP, port: 80}]\n", i, i/250, 1+i%250)
	}
	docs := make([]string, n)
	for i := range docs {
		docs[i] = svc(i)
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"all.yaml": strings.Join(docs, "---\n")})
	objs, errs := Load(dir)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(objs.Services) != n {
		t.Fatalf("loaded %d Services, want %d", len(objs.Services), n)
	}
	for i, s := range objs.Services {
		if want := fmt.Sprintf("s%d", i); s.Name != want {
			t.Fatalf("Service %d is %s, want %s: file order lost", i, s.Name, want)
		}
	}

	bad := []int{decodeBatchSize + 10, 2*decodeBatchSize + 3}
	for _, b := range bad {
		docs[b] = "apiVersion: v1\nkind: Service\nmetadata: {name: bad}\nspec: {ports: [{port: x}]}\n"
	}
	writeFiles(t, dir, map[string]string{"all.yaml": strings.Join(docs, "---\n")})
	_, errs = Load(dir)
	if len(errs) != 1 || errs[0].Document != bad[0]+1 {
		t.Fatalf("errors %v, want one naming document %d (the first bad one)", errs, bad[0]+1)
	}
}

// TestReloadCapFollowsCost: under a steady churn a cheap reload is repeated every
// MinReloadDelay, an expensive one at twice its cost, never less often than MaxReloadDelay.
func TestReloadCapFollowsCost(t *testing.T) {
	for _, c := range []struct{ cost, want time.Duration }{
		{0, MinReloadDelay},
		{30 * time.Millisecond, MinReloadDelay},
		{300 * time.Millisecond, 600 * time.Millisecond},
		{5 * time.Second, MaxReloadDelay},
	} {
		if got := reloadCap(c.cost); got != c.want {
			t.Errorf("reloadCap(%v) = %v, want %v", c.cost, got, c.want)
		}
	}
}
