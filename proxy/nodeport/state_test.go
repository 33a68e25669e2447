package nodeport

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// TestRestartKeepsAssignments: a new Assigner over the same state directory gives every Service
// what it had, including dynamically picked ports, health-check ports and blocks.
func TestRestartKeepsAssignments(t *testing.T) {
	dir := t.TempDir()
	mk := func() []*corev1.Service {
		return []*corev1.Service{
			newSvc("web", 0, port("http", "TCP", 80, 0), port("https", "TCP", 443, 0)),
			newSvc("lb", 1, allocateLB(true), local(0), port("http", "TCP", 80, 0)),
			newSvc("rtp", 2, annotate(annotation.PortRangesKey, "rtp=16384-16393"), port("rtp", "UDP", 16384, 0)),
		}
	}
	first := mk()
	assign(t, newAssigner(t, testNodePorts, dir), first...)

	// A different random seed: only the state can make the ports come out the same.
	again, err := New(Config{NodePortRange: testNodePorts, BlockRange: testBlocks, StateDir: dir}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	second := mk()
	slices := []*corev1.Service{second[2], second[0], second[1]}
	if probs := assign(t, again, slices...); len(probs) != 0 {
		t.Fatalf("after restart: got problems %v, want none", probs)
	}
	for i := range first {
		f, s := first[i], second[i]
		if got, want := nodePorts(s), nodePorts(f); !equalPorts(got, want) {
			t.Errorf("%s after restart: got node ports %v, want %v", s.Name, got, want)
		}
		if s.Spec.HealthCheckNodePort != f.Spec.HealthCheckNodePort {
			t.Errorf("%s after restart: got healthCheckNodePort %d, want %d", s.Name, s.Spec.HealthCheckNodePort, f.Spec.HealthCheckNodePort)
		}
		if g, w := s.Annotations[annotation.NodePortRangesKey], f.Annotations[annotation.NodePortRangesKey]; g != w {
			t.Errorf("%s after restart: got blocks %q, want %q", s.Name, g, w)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != StateFile {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("state directory: got %v, want only %s (no temporary files left)", names, StateFile)
	}
}

func equalPorts(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStateFile: the file is JSON a person can read, and a deleted Service leaves it.
func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	a := newAssigner(t, testNodePorts, dir)
	assign(t, a, newSvc("web", 0, port("http", "TCP", 80, 30080)), newSvc("gone", 1, port("http", "TCP", 80, 30081)))
	assign(t, a, newSvc("web", 0, port("http", "TCP", 80, 30080)))
	data, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	var got state
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("state file is not JSON: %v\n%s", err, data)
	}
	want := svcEntry{File: "web.yaml", Ports: []portEntry{{Name: "http", NodePort: 30080}}}
	if len(got.Services) != 1 || !equalEntry(got.Services["default/web"], want) {
		t.Errorf("state: got %+v, want only default/web %+v", got.Services, want)
	}
	if got.Version != stateVersion || got.NodePortRange != testNodePorts {
		t.Errorf("state header: got version %d range %s, want %d and %s", got.Version, got.NodePortRange, stateVersion, testNodePorts)
	}
}

func equalEntry(a, b svcEntry) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// TestBadStateRefused: a state file that cannot be trusted stops New with a message that says
// what to do, instead of silently moving every port.
func TestBadStateRefused(t *testing.T) {
	cases := []struct {
		name, content, want string
	}{
		{"not JSON", "{", "move it away"},
		{"unknown field", `{"version":1,"nodePortRange":"30000-32767","services":{},"extra":1}`, "not valid"},
		{"other version", `{"version":7,"nodePortRange":"30000-32767","services":{}}`, "version 7"},
		{"bad range", `{"version":1,"nodePortRange":"3-1","services":{}}`, "not valid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, StateFile), []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := New(Config{NodePortRange: testNodePorts, StateDir: dir}, logr.Discard())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("New with %s state: got error %v, want one containing %q", c.name, err, c.want)
			}
		})
	}
}

// TestPersistFailureReported: an unwritable state directory is an error from Assign, and the
// assignment still applies.
func TestPersistFailureReported(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	a, err := New(Config{NodePortRange: testNodePorts, StateDir: dir}, logr.Discard())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// After start, a file appears where the directory should be (root ignores permissions, so
	// this is the portable way to make the write fail).
	if err := os.WriteFile(dir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newSvc("web", 0, port("http", "TCP", 80, 0))
	_, err = assignWith(t, a, nil, s)
	if err == nil || !strings.Contains(err.Error(), "restart") {
		t.Errorf("Assign with an unwritable state directory: got %v, want an error that says the ports would not survive a restart", err)
	}
	if s.Spec.Ports[0].NodePort == 0 {
		t.Errorf("Assign with an unwritable state directory: got no node port, want one assigned anyway")
	}
}
