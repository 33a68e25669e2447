package app

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// kubeconfigFile writes a minimal kubeconfig naming an API server that is never dialled.
func kubeconfigFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://198.18.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestNewSourcePicksMode(t *testing.T) {
	kc := kubeconfigFile(t)
	dir := t.TempDir()
	tests := []struct {
		name      string
		args      []string
		inCluster bool
		want      string // prefix of the source's String, or of the error
		wantErr   bool
	}{
		{name: "manifests", args: []string{"--manifests", dir, "--node-name", "n1"}, want: "manifests "},
		{name: "manifests win over the in-cluster environment", args: []string{"--manifests", dir, "--node-name", "n1"}, inCluster: true, want: "manifests "},
		{name: "kubeconfig", args: []string{"--kubeconfig", kc, "--hostname-override", "n1"}, want: "kubernetes "},
		{name: "in a pod", args: []string{"--node-name", "n1"}, inCluster: true, want: "in-cluster API config", wantErr: true},
		{name: "kubeconfig without node name", args: []string{"--kubeconfig", kc}, want: "the node name is required", wantErr: true},
		{name: "both sources", args: []string{"--manifests", dir, "--kubeconfig", kc, "--node-name", "n1"}, want: "--manifests and --kubeconfig", wantErr: true},
		{name: "no source", args: []string{"--node-name", "n1"}, want: "no source", wantErr: true},
		{name: "unreadable kubeconfig", args: []string{"--kubeconfig", filepath.Join(dir, "missing"), "--node-name", "n1"}, want: "load --kubeconfig", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			host, port := "", ""
			if tc.inCluster {
				// No token file exists here, so the in-cluster config fails after mode selection.
				host, port = "198.18.0.1", "443"
			}
			t.Setenv("KUBERNETES_SERVICE_HOST", host)
			t.Setenv("KUBERNETES_SERVICE_PORT", port)
			var o Options
			if err := parseFlags("run", &o, runFlags, tc.args, io.Discard); err != nil {
				t.Fatalf("flags %q: %v", tc.args, err)
			}
			src, err := newSource(&o, logr.Discard(), nil, nil, nil)
			switch {
			case tc.wantErr && err == nil:
				t.Fatalf("got source %v, want an error starting %q", src, tc.want)
			case tc.wantErr && !strings.HasPrefix(err.Error(), tc.want):
				t.Fatalf("got error %q, want one starting %q", err, tc.want)
			case !tc.wantErr && err != nil:
				t.Fatalf("got error %v, want a source %q", err, tc.want)
			case !tc.wantErr && !strings.HasPrefix(src.String(), tc.want):
				t.Fatalf("got source %q, want %q...", src, tc.want)
			}
		})
	}
}

func TestHostnameOverrideIsNodeName(t *testing.T) {
	var o Options
	if err := parseFlags("run", &o, runFlags, []string{"--hostname-override", "node-7", "--kubeconfig", "/k"}, os.Stderr); err != nil {
		t.Fatal(err)
	}
	if o.NodeName != "node-7" || o.Kubeconfig != "/k" {
		t.Errorf("got node %q kubeconfig %q, want node-7 and /k", o.NodeName, o.Kubeconfig)
	}
}
