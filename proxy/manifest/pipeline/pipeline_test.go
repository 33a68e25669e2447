package pipeline

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
)

// Two NodePort Services ask for the same node port: the younger one is served without it.
const older = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, creationTimestamp: "2025-01-01T00:00:00Z"}
spec: {type: NodePort, clusterIP: 198.19.0.61, ports: [{name: http, protocol: TCP, port: 80, nodePort: 30080}]}
`

const younger = `apiVersion: v1
kind: Service
metadata: {name: late, namespace: default, creationTimestamp: "2025-01-02T00:00:00Z"}
spec: {type: NodePort, clusterIP: 198.19.0.62, ports: [{name: http, protocol: TCP, port: 80, nodePort: %d}]}
`

type fixture struct {
	dir      string
	pl       *Pipeline
	tracker  *model.Tracker
	mu       sync.Mutex
	lines    []string
	problems []nodeport.Problem
	missing  []bool // OnNodeMissing's calls
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	log := funcr.New(func(prefix, args string) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.lines = append(f.lines, args)
	}, funcr.Options{})
	a, err := nodeport.New(nodeport.Config{NodePortRange: allocator.MustParseRange(policy.DefaultNodePortRange),
		BlockRange: allocator.MustParseRange(policy.DefaultBlockRange)}, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	f.tracker = model.NewTracker(model.TrackerConfig{NodeName: "node-a", Logger: logr.Discard()})
	f.pl = New(Config{Dir: f.dir, Loader: manifest.Loader{}, Assigner: a, Tracker: f.tracker, NodeName: "node-a", Log: log,
		OnProblem:     func(p nodeport.Problem) { f.problems = append(f.problems, p) },
		OnNodeMissing: func(m bool) { f.missing = append(f.missing, m) }})
	return f
}

func (f *fixture) write(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(f.dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// take returns and forgets the log lines that contain s.
func (f *fixture) take(s string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var got, rest []string
	for _, l := range f.lines {
		if strings.Contains(l, s) {
			got = append(got, l)
		} else {
			rest = append(rest, l)
		}
	}
	f.lines = rest
	return got
}

// A node port the assigner refuses is logged and handed to OnProblem when it appears, not again
// at every reload of the unchanged directory (the count would otherwise grow with time), again
// when its reason changes, and its end is logged; the Service is fed without the port.
func TestProblemsReportedOncePerChange(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.yaml", older)
	f.write(t, "b.yaml", strings.Replace(younger, "%d", "30080", 1))

	res, err := f.pl.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Problems) != 1 || res.Problems[0].Service != "default/late" || res.Problems[0].Port != "http" {
		t.Fatalf("problems = %v; want late's http node port", res.Problems)
	}
	if len(f.problems) != 1 || len(f.take(`"msg"="node port not assigned`)) != 1 {
		t.Fatalf("first load: %d problems handed on; want 1 and one log line", len(f.problems))
	}
	svc := f.tracker.Service(model.ServiceKey{Namespace: "default", Name: "late"})
	if svc == nil || svc.Rejected != nil {
		t.Fatalf("late = %+v; want it served (without the node port)", svc)
	}

	if _, err := f.pl.Load(); err != nil {
		t.Fatal(err)
	}
	if len(f.problems) != 1 || len(f.take("node port not assigned")) != 0 {
		t.Fatalf("reload of an unchanged directory: %d problems handed on; want still 1 and no new log line", len(f.problems))
	}

	f.write(t, "b.yaml", strings.Replace(younger, "%d", "40000", 1)) // now outside the range
	if _, err := f.pl.Load(); err != nil {
		t.Fatal(err)
	}
	if len(f.problems) != 2 || len(f.take("node port not assigned")) != 1 {
		t.Fatalf("changed reason: %d problems handed on; want 2 and a new log line", len(f.problems))
	}

	f.write(t, "b.yaml", strings.Replace(younger, "%d", "30081", 1))
	if res, err := f.pl.Load(); err != nil || len(res.Problems) != 0 {
		t.Fatalf("free port: problems %v, err %v; want none", res.Problems, err)
	}
	if len(f.problems) != 2 || len(f.take("node-port problem resolved")) != 1 {
		t.Fatalf("resolved: %d problems handed on; want still 2 and one line saying it is resolved", len(f.problems))
	}
}

// A directory that cannot be read is an error and feeds nothing: a missing directory is not
// "no Services", and the Services fed before stay.
func TestLoadMissingDirectoryFeedsNothing(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.yaml", older)
	if _, err := f.pl.Load(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(f.dir); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pl.Load(); err == nil || !strings.Contains(err.Error(), "read manifest directory") {
		t.Fatalf("err = %v; want the directory named", err)
	}
	if f.tracker.Service(model.ServiceKey{Namespace: "default", Name: "web"}) == nil {
		t.Fatal("web was deleted when the directory went missing; want it kept")
	}
}

// The first load warns when this node's Node object is missing, once.
func TestWarnsOnceWithoutNode(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.yaml", older)
	for i := 0; i < 2; i++ {
		if _, err := f.pl.Load(); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.take("no Node object"); len(got) != 1 {
		t.Fatalf("%d warnings about the missing Node; want 1", len(got))
	}
}

const nodeA = `apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 198.18.0.1}]}
`

// The Node manifest removed while running (a file moved away, a Node left out of a regenerated
// file) does not stop the node ports: the last Node stays in the model, and the loss is logged
// as a warning at every load and reported to OnNodeMissing until the Node is back.
func TestNodeRemovedIsKept(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.yaml", older)
	f.write(t, "node.yaml", nodeA)
	load := func(what string) {
		t.Helper()
		if _, err := f.pl.Load(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	load("start")
	if err := os.Remove(filepath.Join(f.dir, "node.yaml")); err != nil {
		t.Fatal(err)
	}
	load("node.yaml removed")
	load("reload without the Node")
	if n := f.tracker.Snapshot().Node; n == nil || len(n.Addresses) == 0 {
		t.Fatalf("Node in the model after node.yaml was removed: %+v; want the last one kept", n)
	}
	if got := f.take("no longer in the manifests"); len(got) != 2 {
		t.Errorf("warnings about the missing Node: %q; want one per load", got)
	}
	f.write(t, "node.yaml", nodeA)
	load("node.yaml back")
	if got := f.take("is back"); len(got) != 1 {
		t.Errorf("log lines about the Node back: %q; want one", got)
	}
	if want := []bool{false, true, true, false}; !slices.Equal(f.missing, want) {
		t.Errorf("OnNodeMissing calls %v; want %v", f.missing, want)
	}
}

// A file that cannot be used is logged when it breaks (and when its error changes), not at every
// reload: the Watcher retries an unreadable file every second.
func TestFileErrorsLoggedOncePerChange(t *testing.T) {
	f := newFixture(t)
	f.write(t, "a.yaml", older)
	f.write(t, "b.yaml", "kind: [")
	for i := 0; i < 3; i++ {
		if _, err := f.pl.Load(); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.take("manifest skipped"); len(got) != 1 || !strings.Contains(got[0], "b.yaml") {
		t.Errorf("three loads of a broken b.yaml logged %q; want one line naming it", got)
	}
	f.write(t, "b.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec: {bogus: 1}\n")
	if _, err := f.pl.Load(); err != nil {
		t.Fatal(err)
	}
	if got := f.take("manifest skipped"); len(got) != 1 {
		t.Errorf("a new error in b.yaml logged %q; want one line", got)
	}
	f.write(t, "b.yaml", strings.Replace(younger, "%d", "30081", 1))
	if _, err := f.pl.Load(); err != nil {
		t.Fatal(err)
	}
	if got := f.take("loads again"); len(got) != 1 || !strings.Contains(got[0], "b.yaml") {
		t.Errorf("b.yaml fixed: logged %q; want one line saying it loads again", got)
	}
}
