package k8s

import (
	"context"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/nftproxy/nftproxy/test/cluster"
)

// deployDir is the kustomize base, relative to this package.
var deployDir = filepath.Join("..", "..", "deploy")

// buildDeploy runs kustomize on deploy/ as `kubectl apply -k deploy/` would.
func buildDeploy(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	return buildKustomization(t, deployDir)
}

// buildKustomization runs kustomize on dir as `kubectl apply -k DIR` would.
func buildKustomization(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatalf("kustomize resource %s: %v", r.CurId(), err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

// apply server-side-applies objs as admin (dryRun: validated and admitted, not stored).
func apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, dryRun bool) error {
	return cluster.Apply(ctx, cfg, objs, "nftproxy-test", dryRun)
}

// TestDeployCreatesWhatTheREADMESays pins the objects `kubectl apply -k deploy/` creates to the
// table in deploy/README.md.
func TestDeployCreatesWhatTheREADMESays(t *testing.T) {
	var got []string
	for _, o := range buildDeploy(t) {
		got = append(got, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
	}
	sort.Strings(got)
	want := []string{
		"ClusterRole /nftproxy",
		"ClusterRoleBinding /nftproxy",
		"ConfigMap kube-system/nftproxy",
		"DaemonSet kube-system/nftproxy",
		"ServiceAccount kube-system/nftproxy",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("kustomize build: got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDeployServerSideDryRun sends every object of the kustomize build to a real API server
// with server-side apply and dryRun=All: schema, defaulting and admission (priority class,
// RBAC escalation checks) all run; nothing is stored.
func TestDeployServerSideDryRun(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	if err := apply(ctx, c.Config(), buildDeploy(t), true); err != nil {
		t.Fatal(err)
	}
}

// daemonArgs returns the nftproxy container's arguments from the DaemonSet of the build, with
// $(VAR) expanded as the kubelet would: NODE_NAME from spec.nodeName, the others from the
// ConfigMap. It fails on a reference it cannot resolve, as a pod would not start.
func daemonArgs(t *testing.T, objs []*unstructured.Unstructured, nodeName string) []string {
	t.Helper()
	ds, cm := daemonSetOf(t, objs)
	if len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("DaemonSet: got %d containers, want 1", len(ds.Spec.Template.Spec.Containers))
	}
	return containerArgs(t, ds.Spec.Template.Spec.Containers[0], cm, nodeName)
}

// daemonSetOf returns the DaemonSet and the ConfigMap of the build.
func daemonSetOf(t *testing.T, objs []*unstructured.Unstructured) (appsv1.DaemonSet, corev1.ConfigMap) {
	t.Helper()
	var ds appsv1.DaemonSet
	var cm corev1.ConfigMap
	for _, o := range objs {
		var err error
		switch o.GetKind() {
		case "DaemonSet":
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds)
		case "ConfigMap":
			err = runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &cm)
		}
		if err != nil {
			t.Fatalf("%s: %v", o.GetKind(), err)
		}
	}
	return ds, cm
}

// containerArgs returns ctr's arguments with $(VAR) expanded as the kubelet would (see
// daemonArgs).
func containerArgs(t *testing.T, ctr corev1.Container, cm corev1.ConfigMap, nodeName string) []string {
	t.Helper()
	env := map[string]string{}
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			env[e.Name] = nodeName
		case e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			v, ok := cm.Data[ref.Key]
			if ref.Name != cm.Name || !ok {
				t.Fatalf("env %s: ConfigMap %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			env[e.Name] = v
		default:
			env[e.Name] = e.Value
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	var args []string
	for _, a := range ctr.Args {
		for _, m := range ref.FindAllStringSubmatch(a, -1) {
			if _, ok := env[m[1]]; !ok {
				t.Fatalf("argument %q refers to $(%s), which the container does not define", a, m[1])
			}
		}
		args = append(args, ref.ReplaceAllStringFunc(a, func(s string) string { return env[ref.FindStringSubmatch(s)[1]] }))
	}
	return args
}

// setConfig changes keys of the build's ConfigMap (before it is applied and read).
func setConfig(t *testing.T, objs []*unstructured.Unstructured, kv map[string]string) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() != "ConfigMap" {
			continue
		}
		for k, v := range kv {
			if _, ok, _ := unstructured.NestedString(o.Object, "data", k); !ok {
				t.Fatalf("ConfigMap has no key %q", k)
			}
			if err := unstructured.SetNestedField(o.Object, v, "data", k); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	t.Fatal("the build has no ConfigMap")
}
