package app

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/nodeport"
	"github.com/nftproxy/nftproxy/test/netns"
)

// nodePortManifests is a Node and a NodePort Service whose two ports have no nodePort: manifest
// mode picks both from the dynamic band.
const nodePortManifests = `apiVersion: v1
kind: Node
metadata: {name: node-a}
status: {addresses: [{type: InternalIP, address: 198.18.1.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: np, namespace: default}
spec:
  type: NodePort
  clusterIP: 198.19.0.70
  ports: [{name: http, protocol: TCP, port: 80}, {name: alt, protocol: TCP, port: 81}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: np-1, namespace: default, labels: {kubernetes.io/service-name: np}}
addressType: IPv4
ports: [{name: http, port: 80}, {name: alt, port: 81}]
endpoints: [{addresses: [198.18.128.70]}]
`

// nodePortElems are the node ports a ruleset text dispatches ("tcp . 31234"), sorted.
func nodePortElems(t *testing.T, text string) []string {
	t.Helper()
	got := regexp.MustCompile(`tcp \. (3\d{4})`).FindAllStringSubmatch(text, -1)
	var out []string
	for _, m := range got {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	slices.Sort(out)
	if len(out) != 2 {
		t.Fatalf("found node ports %v, want the Service's two:\n%s", out, text)
	}
	return out
}

func manifestDir(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "np.yaml"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Without a state directory, render picks the missing node ports from a fixed seed: the same
// manifests print the same ruleset every time.
func TestRenderNodePortsDeterministic(t *testing.T) {
	dir := manifestDir(t, nodePortManifests)
	var first []string
	for i := 0; i < 3; i++ {
		code, out, errOut := run("render", "--manifests", dir, "--node-name", "node-a", "--ip-families", "ipv4")
		if code != 0 {
			t.Fatalf("render: exit %d: %s", code, errOut)
		}
		got := nodePortElems(t, out)
		if first == nil {
			first = got
		} else if !slices.Equal(got, first) {
			t.Fatalf("render %d printed node ports %v, the first %v: want the same every time", i+1, got, first)
		}
	}
}

// run --once applies the manifests in a fresh namespace, keeping its node-port assignments in a
// state directory; render with that directory prints the node ports the kernel holds, and
// leaves the state file as it was.
func TestRenderStateDirMatchesRun(t *testing.T) {
	ns := netns.New(t, "nftp-rstate")
	dir, state := manifestDir(t, nodePortManifests), t.TempDir()
	var code int
	var errOut string
	if err := ns.Do(func() error {
		code, _, errOut = run("run", "--once", "--manifests", dir, "--node-name", "node-a", "--ip-families", "ipv4", "--state-dir", state)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("run --once: exit %d: %s", code, errOut)
	}
	kernel, err := ns.Run("nft", "list", "map", "ip", "nftproxy", "service-nodeports")
	if err != nil {
		t.Fatal(err)
	}
	applied := nodePortElems(t, kernel)
	before, err := os.ReadFile(filepath.Join(state, nodeport.StateFile))
	if err != nil {
		t.Fatalf("run --once kept no state: %v", err)
	}

	code, out, errOut := run("render", "--manifests", dir, "--node-name", "node-a", "--ip-families", "ipv4", "--state-dir", state)
	if code != 0 {
		t.Fatalf("render --state-dir: exit %d: %s", code, errOut)
	}
	if got := nodePortElems(t, out); !slices.Equal(got, applied) {
		t.Errorf("render --state-dir printed node ports %v; the kernel holds %v", got, applied)
	}
	if after, err := os.ReadFile(filepath.Join(state, nodeport.StateFile)); err != nil || string(after) != string(before) {
		t.Errorf("render changed the state file (err %v):\nbefore %s\nafter %s", err, before, after)
	}
	// A state directory without a file: render assigns afresh and writes nothing there.
	empty := t.TempDir()
	if code, _, errOut := run("render", "--manifests", dir, "--node-name", "node-a", "--state-dir", empty); code != 0 {
		t.Fatalf("render with an empty state directory: exit %d: %s", code, errOut)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("render wrote %d files into the state directory; want none", len(ents))
	}
}
