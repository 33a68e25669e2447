package cluster

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Apply server-side-applies objs with cfg's identity, as `kubectl apply --server-side` does:
// forced (the field manager takes over conflicting fields) and strict (an unknown or duplicate
// field fails instead of being dropped with a warning). dryRun validates and admits without
// storing.
func Apply(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured, fieldManager string, dryRun bool) error {
	force := true
	opts := metav1.PatchOptions{FieldManager: fieldManager, Force: &force, FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return eachResource(cfg, objs, func(o *unstructured.Unstructured, ri dynamic.ResourceInterface) error {
		data, err := o.MarshalJSON()
		if err != nil {
			return err
		}
		if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, opts); err != nil {
			return fmt.Errorf("apply %s %s/%s (dry run %v): %w", o.GetKind(), o.GetNamespace(), o.GetName(), dryRun, err)
		}
		return nil
	})
}

// Delete deletes objs as `kubectl delete -f` does (background propagation: the garbage
// collector removes what they own); one already gone is no error.
func Delete(ctx context.Context, cfg *rest.Config, objs []*unstructured.Unstructured) error {
	background := metav1.DeletePropagationBackground
	return eachResource(cfg, objs, func(o *unstructured.Unstructured, ri dynamic.ResourceInterface) error {
		err := ri.Delete(ctx, o.GetName(), metav1.DeleteOptions{PropagationPolicy: &background})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		return nil
	})
}

// eachResource calls f, in order, with each object and the dynamic client of its resource
// (namespaced where its kind is), stopping at the first error.
func eachResource(cfg *rest.Config, objs []*unstructured.Unstructured, f func(*unstructured.Unstructured, dynamic.ResourceInterface) error) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if err := f(o, ri); err != nil {
			return err
		}
	}
	return nil
}
