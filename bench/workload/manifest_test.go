package workload

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestWriteManifest: the manifest holds the Node first, then each Service followed by its
// EndpointSlice, named after the Service, and the same workload writes the same bytes.
func TestWriteManifest(t *testing.T) {
	wl := Generate(DefaultSpec(5, 3, 1))
	var a, b bytes.Buffer
	if err := wl.WriteManifest(&a); err != nil {
		t.Fatal(err)
	}
	if err := Generate(DefaultSpec(5, 3, 1)).WriteManifest(&b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same workload wrote different manifests")
	}
	type doc struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	var kinds, owners []string
	for i, text := range strings.Split(a.String(), "---\n")[1:] {
		var d doc
		if err := json.Unmarshal([]byte(text), &d); err != nil {
			t.Fatalf("decode document %d: %v", i+1, err)
		}
		kinds = append(kinds, d.Kind)
		switch d.Kind {
		case "Service":
			owners = append(owners, d.Metadata.Name)
		case "EndpointSlice":
			owners = append(owners, d.Metadata.Labels["kubernetes.io/service-name"])
		}
	}
	want := []string{"Node"}
	for range wl.Services {
		want = append(want, "Service", "EndpointSlice")
	}
	if len(kinds) != len(want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
	for i := range want {
		if kinds[i] != want[i] {
			t.Fatalf("kinds %v, want %v", kinds, want)
		}
	}
	for i := 0; i+1 < len(owners); i += 2 {
		if owners[i] != owners[i+1] || owners[i] != wl.Services[i/2].Key.Name {
			t.Errorf("Service %d: Service %q and slice of %q, want both %q", i/2, owners[i], owners[i+1], wl.Services[i/2].Key.Name)
		}
	}
}
