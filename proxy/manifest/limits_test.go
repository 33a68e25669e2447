package manifest

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// svcYAML is a valid Service document named name.
func svcYAML(name string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: %s}\nspec: {clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]}\n", name)
}

func TestFileSizeLimit(t *testing.T) {
	dir := t.TempDir()
	small := svcYAML("small")
	big := svcYAML("big") + "# " + strings.Repeat("x", 200) + "\n"
	writeFiles(t, dir, map[string]string{"a-small.yaml": small, "b-big.yaml": big})
	limit := int64(len(small))
	objs, errs := Loader{MaxFileBytes: limit}.Load(dir)
	if got, want := refs(objs), []string{"a-small.yaml: Service default/small"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("loaded = %v; want %v (a file at the limit loads)", got, want)
	}
	if len(errs) != 1 || errs[0].File != "b-big.yaml" || !strings.Contains(errs[0].Error(), fmt.Sprintf("limit of %d bytes", limit)) ||
		!strings.Contains(errs[0].Error(), "--manifest-max-file-size") {
		t.Fatalf("errors = %v; want one for b-big.yaml naming the limit of %d bytes and the flag", errs, limit)
	}
	if _, errs := Load(dir); len(errs) != 0 {
		t.Fatalf("default limit: errors = %v; want none", errs)
	}
}

// nestedList wraps a Service in depth Lists, as JSON.
func nestedList(depth int, name string) string {
	s := fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":%q},"spec":{"clusterIP":"10.96.0.10","ports":[{"name":"http","port":80}]}}`, name)
	for range depth {
		s = `{"apiVersion":"v1","kind":"List","items":[` + s + `]}`
	}
	return s
}

func TestListNesting(t *testing.T) {
	t.Run("allowed depth loads", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"l.json": nestedList(MaxListDepth, "deep")})
		objs, errs := Load(dir)
		if len(errs) != 0 || len(objs.Services) != 1 {
			t.Fatalf("errors = %v, %d services; want the Service inside %d Lists loaded", errs, len(objs.Services), MaxListDepth)
		}
	})
	t.Run("one level more is an error", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"l.json": nestedList(MaxListDepth+1, "deeper")})
		objs, errs := Load(dir)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "at most 3 levels of List") || len(objs.From) != 0 {
			t.Fatalf("errors = %v, loaded %v; want one nesting error and nothing loaded", errs, refs(objs))
		}
	})
	// The file: 132 KB of nested Lists took over a minute and 415 MB; it is now refused
	// after decoding MaxListDepth levels.
	t.Run("132 KB of nesting", func(t *testing.T) {
		dir := t.TempDir()
		s := nestedList(0, "x")
		for len(s) < 132<<10 {
			s = `{"apiVersion":"v1","kind":"List","items":[` + s + `]}`
		}
		writeFiles(t, dir, map[string]string{"l.json": s})
		_, errs := Load(dir)
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "levels of List") {
			t.Fatalf("errors = %v; want one nesting error", errs)
		}
	})
}

func TestDuplicateKeys(t *testing.T) {
	tests := map[string]string{
		"dup.yaml": "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec:\n  clusterIP: 10.96.0.10\n  clusterIP: 10.96.0.11\n  ports: [{name: http, port: 80}]\n",
		"dup.json": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","name":"b"},"spec":{"ports":[{"port":80}]}}`,
		"dup-in-list.json": `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},` +
			`"spec":{"ports":[{"port":80,"port":81}]}}]}`,
		"dup-label.json": `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","labels":{"x":"1","x":"2"}},"spec":{"ports":[{"port":80}]}}`,
	}
	for file, content := range tests {
		t.Run(file, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{file: content})
			objs, errs := Load(dir)
			// YAML's parser says "already set", the strict JSON decoder "duplicate field".
			if len(errs) != 1 || !(strings.Contains(errs[0].Error(), "already") || strings.Contains(errs[0].Error(), "duplicate field")) || len(objs.From) != 0 {
				t.Fatalf("errors = %v, loaded %v; want one duplicate-key error and nothing loaded", errs, refs(objs))
			}
		})
	}
}

func TestEndpointAddresses(t *testing.T) {
	slice := func(family string, addrs ...string) string {
		var eps []string
		for _, a := range addrs {
			eps = append(eps, fmt.Sprintf("{addresses: [%q]}", a))
		}
		return fmt.Sprintf("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s, labels: {kubernetes.io/service-name: web}}\n"+
			"addressType: %s\nports: [{name: http, port: 80}]\nendpoints: [%s]\n", family, strings.Join(eps, ", "))
	}
	tests := []struct {
		name, family, addr, problem string
	}{
		{"loopback", "IPv4", "127.0.0.1", "loopback"},
		{"loopback v6", "IPv6", "::1", "loopback"},
		{"link-local", "IPv4", "169.254.1.1", "link-local"},
		{"link-local v6", "IPv6", "fe80::1", "link-local"},
		{"metadata", "IPv4", "169.254.169.254", "metadata"},
		{"metadata v6", "IPv6", "fd00:ec2::254", "metadata"},
		{"multicast", "IPv4", "239.1.1.1", "multicast"},
		{"multicast v6", "IPv6", "ff05::1", "multicast"},
		{"unspecified", "IPv4", "0.0.0.0", "unspecified"},
		{"unspecified v6", "IPv6", "::", "unspecified"},
		{"v4-mapped loopback", "IPv6", "::ffff:127.0.0.1", "IPv6 address"},
		{"wrong family", "IPv4", "fd00::1", "IPv4 address"},
		{"not an IP", "IPv4", "10.0.0.300", "must be a valid IP address"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			good := "198.18.128.11"
			if tc.family == "IPv6" {
				good = "fd00:128::11"
			}
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"s.yaml": slice(tc.family, tc.addr, good)})
			objs, errs := Load(dir)
			if len(errs) != 0 || len(objs.EndpointSlices) != 1 {
				t.Fatalf("errors = %v, %d slices; want the slice loaded", errs, len(objs.EndpointSlices))
			}
			eps := objs.EndpointSlices[0].Endpoints
			if len(eps) != 1 || eps[0].Addr.String() != good {
				t.Fatalf("endpoints = %+v; want only %s kept", eps, good)
			}
			if len(objs.Invalid) != 1 || objs.Invalid[0].Endpoint != 0 || !strings.Contains(objs.Invalid[0].Error(), tc.problem) ||
				!strings.Contains(objs.Invalid[0].Error(), "s.yaml document 1: EndpointSlice default/s: endpoint 0 dropped") {
				t.Fatalf("invalid = %v; want endpoint 0 of s.yaml's slice dropped for %q", objs.Invalid, tc.problem)
			}
		})
	}
}

// A file that cannot be read does not make the whole load a directory failure.
func TestDirectoryError(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.yaml": svcYAML("a")})
	if _, errs := Load(dir); DirectoryError(errs) != nil {
		t.Fatalf("readable directory: DirectoryError = %v; want nil", DirectoryError(errs))
	}
	for name, path := range map[string]string{"missing": filepath.Join(dir, "nope"), "a file": filepath.Join(dir, "a.yaml")} {
		_, errs := Load(path)
		if err := DirectoryError(errs); err == nil || !strings.Contains(err.Error(), "read manifest directory") {
			t.Errorf("%s: DirectoryError = %v; want a directory error", name, err)
		}
	}
	empty := t.TempDir()
	if objs, errs := Load(empty); len(errs) != 0 || len(objs.From) != 0 {
		t.Errorf("empty directory: %v, %v; want no objects and no error (an empty directory is \"no Services\")", refs(objs), errs)
	}
}

func removeFile(dir, name string) error { return os.Remove(filepath.Join(dir, name)) }
