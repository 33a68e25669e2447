package allocator

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// deployDir is the controller's kustomize base, relative to this package.
var deployDir = filepath.Join("..", "..", "deploy", "allocator")

// manifests reads the objects deploy/allocator/kustomization.yaml lists, with its namespace
// set on the namespaced ones, as `kubectl apply -k` would (the base uses no other transformer
// than namespace and images; the image does not matter to an API server).
func manifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	var k struct {
		Namespace string   `json:"namespace"`
		Resources []string `json:"resources"`
	}
	b, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.Namespace == "" || len(k.Resources) == 0 {
		t.Fatalf("kustomization.yaml: got namespace %q and %d resources, want both", k.Namespace, len(k.Resources))
	}
	var out []*unstructured.Unstructured
	for _, r := range k.Resources {
		b, err := os.ReadFile(filepath.Join(deployDir, r))
		if err != nil {
			t.Fatalf("resource %s listed in kustomization.yaml: %v", r, err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		switch u.GetKind() {
		case "ClusterRole", "ClusterRoleBinding":
		default:
			u.SetNamespace(k.Namespace)
		}
		out = append(out, u)
	}
	return out
}

// install creates the base's objects as admin: RBAC and the ServiceAccount for real (the
// controllers run under them), the ConfigMap and Deployment with a server-side dry run (there
// are no nodes to run it; schema, defaulting and admission still check them).
func install(ctx context.Context, t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	for _, u := range manifests(t) {
		if err := create(ctx, admin, u); err != nil {
			t.Fatalf("create %s %s/%s from %s: %v", u.GetKind(), u.GetNamespace(), u.GetName(), deployDir, err)
		}
	}
}

func create(ctx context.Context, cs kubernetes.Interface, u *unstructured.Unstructured) error {
	into := func(obj any) error { return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj) }
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
	real := metav1.CreateOptions{FieldValidation: "Strict"}
	ns := u.GetNamespace()
	var err error
	switch u.GetKind() {
	case "ServiceAccount":
		var o corev1.ServiceAccount
		if err = into(&o); err == nil {
			_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &o, real)
		}
	case "ClusterRole":
		var o rbacv1.ClusterRole
		if err = into(&o); err == nil {
			_, err = cs.RbacV1().ClusterRoles().Create(ctx, &o, real)
		}
	case "ClusterRoleBinding":
		var o rbacv1.ClusterRoleBinding
		if err = into(&o); err == nil {
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, &o, real)
		}
	case "Role":
		var o rbacv1.Role
		if err = into(&o); err == nil {
			_, err = cs.RbacV1().Roles(ns).Create(ctx, &o, real)
		}
	case "RoleBinding":
		var o rbacv1.RoleBinding
		if err = into(&o); err == nil {
			_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &o, real)
		}
	case "ConfigMap":
		var o corev1.ConfigMap
		if err = into(&o); err == nil {
			_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &o, dry)
		}
	case "Deployment":
		var o appsv1.Deployment
		if err = into(&o); err == nil {
			_, err = cs.AppsV1().Deployments(ns).Create(ctx, &o, dry)
		}
	default:
		return fmt.Errorf("kind %s is new to this test: teach create() about it", u.GetKind())
	}
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// TestManifestsMatchTheFlags: the Deployment passes only flags `nftproxy allocator` has and
// reads every ConfigMap key it names.
func TestManifestsMatchTheFlags(t *testing.T) {
	var dep appsv1.Deployment
	var cm corev1.ConfigMap
	for _, u := range manifests(t) {
		switch u.GetKind() {
		case "Deployment":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &dep); err != nil {
				t.Fatal(err)
			}
		case "ConfigMap":
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &cm); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("Deployment: got %d containers, want 1", len(dep.Spec.Template.Spec.Containers))
	}
	ctr := dep.Spec.Template.Spec.Containers[0]
	if len(ctr.Args) == 0 || ctr.Args[0] != "allocator" {
		t.Fatalf("Deployment args: got %q, want the allocator subcommand first", ctr.Args)
	}
	known := []string{"kubeconfig", "master", "range-node-port-range", "service-node-port-range", "ip-local-port-range",
		"ip-local-reserved-ports", "service-proxy-name", "lease-namespace", "lease-name", "identity",
		"leader-elect-lease-duration", "leader-elect-renew-deadline", "leader-elect-retry-period", "v",
		"healthz-bind-address", "metrics-bind-address"}
	healthzPort := ""
	for _, a := range ctr.Args[1:] {
		name, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !slices.Contains(known, name) {
			t.Errorf("Deployment passes %q; `nftproxy allocator` has no flag %q", a, name)
		}
		if name == "healthz-bind-address" {
			_, healthzPort, _ = strings.Cut(val, ":")
		}
	}
	// The probes reach the health listener: the port the Deployment gives it.
	for what, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("Deployment has no HTTP %s probe", what)
			continue
		}
		if got := p.HTTPGet.Port.String(); healthzPort == "" || got != healthzPort {
			t.Errorf("%s probe on port %s, --healthz-bind-address port %q: want the same", what, got, healthzPort)
		}
	}
	if p := ctr.LivenessProbe; p != nil && p.HTTPGet != nil && p.HTTPGet.Path != "/livez" {
		t.Errorf("liveness probe path %s, want /livez (/healthz is readiness)", p.HTTPGet.Path)
	}
	for _, e := range ctr.Env {
		if ref := e.ValueFrom; ref != nil && ref.ConfigMapKeyRef != nil {
			if _, ok := cm.Data[ref.ConfigMapKeyRef.Key]; !ok || ref.ConfigMapKeyRef.Name != cm.Name {
				t.Errorf("env %s reads ConfigMap %s key %s, which the base does not have", e.Name, ref.ConfigMapKeyRef.Name, ref.ConfigMapKeyRef.Key)
			}
		}
	}
}
