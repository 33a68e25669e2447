package k8s

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// buildWithMonitoring runs kustomize on an overlay of the deploy/ base with the
// deploy/monitoring component, as deploy/README.md tells operators to write it.
func buildWithMonitoring(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Abs(deployDir)
	if err != nil {
		t.Fatal(err)
	}
	rel := func(p string) string {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	overlay := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + rel(base) +
		"]\ncomponents: [" + rel(filepath.Join(base, "monitoring")) + "]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build of the monitoring overlay: %v", err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		// Through JSON, so that numbers are int64 as the unstructured helpers expect.
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(data); err != nil {
			t.Fatal(err)
		}
		out = append(out, o)
	}
	return out
}

// TestMonitoringComponent: the base creates no PodMonitor (its CRD may be absent); the
// deploy/monitoring component adds one that scrapes a port the DaemonSet's pods serve /metrics
// on, bound to the node's address rather than loopback.
func TestMonitoringComponent(t *testing.T) {
	for _, o := range buildDeploy(t) {
		if o.GetKind() == "PodMonitor" {
			t.Fatal("the deploy/ base creates a PodMonitor; it must stay optional (deploy/monitoring)")
		}
	}
	var pm, ds *unstructured.Unstructured
	for _, o := range buildWithMonitoring(t) {
		switch o.GetKind() {
		case "PodMonitor":
			pm = o
		case "DaemonSet":
			ds = o
		}
	}
	if pm == nil || ds == nil {
		t.Fatalf("overlay: PodMonitor %v, DaemonSet %v; want both", pm != nil, ds != nil)
	}
	if pm.GetNamespace() != ds.GetNamespace() {
		t.Errorf("PodMonitor in %q, DaemonSet in %q: a PodMonitor selects pods of its own namespace", pm.GetNamespace(), ds.GetNamespace())
	}
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	podLabels, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "template", "metadata", "labels")
	for k, v := range sel {
		if podLabels[k] != v {
			t.Errorf("PodMonitor selects %s=%s; the pods have %v", k, v, podLabels)
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(endpoints) != 1 {
		t.Fatalf("PodMonitor endpoints %v, want one", endpoints)
	}
	port, _, _ := unstructured.NestedString(endpoints[0].(map[string]any), "port")
	path, _, _ := unstructured.NestedString(endpoints[0].(map[string]any), "path")

	containers, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	var portNumber int64
	ports, _, _ := unstructured.NestedSlice(c, "ports")
	for _, p := range ports {
		if name, _, _ := unstructured.NestedString(p.(map[string]any), "name"); name == port {
			portNumber, _, _ = unstructured.NestedInt64(p.(map[string]any), "containerPort")
		}
	}
	if portNumber != 10265 || path != "/metrics" {
		t.Errorf("PodMonitor scrapes port %q (container port %d) path %q; want the container's 10265, /metrics", port, portNumber, path)
	}
	args, _, _ := unstructured.NestedStringSlice(c, "args")
	var bind string
	for _, a := range args {
		if v, ok := cutFlag(a, "--metrics-bind-address"); ok {
			bind = v // the last one wins, as in Go's flag package
		}
	}
	if !strings.Contains(bind, "$(POD_IP)") {
		t.Errorf("effective --metrics-bind-address %q, want the pod's (the node's) address $(POD_IP) (args %v)", bind, args)
	}
	// The kubelet substitutes the pod's IP, of either family; the daemon listens on the result.
	for _, ip := range []string{"198.18.1.1", "fd00::1"} {
		addr := strings.ReplaceAll(bind, "$(POD_IP)", ip)
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host != ip || port != "10265" {
			t.Errorf("with POD_IP %s, --metrics-bind-address %q: host %q port %q (%v); want %s and 10265", ip, addr, host, port, err, ip)
		}
	}
	env, _, _ := unstructured.NestedSlice(c, "env")
	if !slices.ContainsFunc(env, func(e any) bool {
		name, _, _ := unstructured.NestedString(e.(map[string]any), "name")
		field, _, _ := unstructured.NestedString(e.(map[string]any), "valueFrom", "fieldRef", "fieldPath")
		return name == "POD_IP" && field == "status.podIP"
	}) {
		t.Errorf("env has no POD_IP from status.podIP: %v", env)
	}
	if len(env) < 2 {
		t.Errorf("env %v: the component's patch replaced the base's variables instead of adding POD_IP", env)
	}
}

// cutFlag returns the value of a --name=value argument.
func cutFlag(arg, name string) (string, bool) {
	if len(arg) > len(name) && arg[:len(name)+1] == name+"=" {
		return arg[len(name)+1:], true
	}
	return "", false
}
