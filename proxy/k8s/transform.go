package k8s

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// slim is the informers' transform: it keeps, of each object, only what the model, the
// rejection Events and the drain check read, before the object enters the informer's cache
// (which the Tracker shares: one copy per object, not two). At 10,000 Services the caches are
// a large part of the daemon's memory, and in real clusters most of an object is bookkeeping
// no proxy reads: server-side-apply managedFields, kubectl's last-applied-configuration (a
// second copy of the whole object), owner references, the endpoints' targetRefs, a Node's
// image list and conditions. The transform is idempotent and leaves other types (tombstones)
// alone.
//
// What stays: names, namespace, UID, resourceVersion and creationTimestamp (informer
// bookkeeping, Event references, conflict order); a Service's labels (the service-proxy-name
// rule), the annotations nftproxy and Kubernetes' service.kubernetes.io/ keys define, its spec
// except the selector and its status.loadBalancer; a slice's service-name label, its
// last-change-trigger-time annotation (the programming latency starts there), address type,
// ports and endpoints (addresses, conditions, node, zone, hints); a Node's labels (zone),
// addresses, taints and deletion timestamp.
func slim(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		slimMeta(&o.ObjectMeta)
		o.Annotations = keepAnnotations(o.Annotations)
		o.Spec.Selector = nil
		o.Status.Conditions = nil
	case *discoveryv1.EndpointSlice:
		slimMeta(&o.ObjectMeta)
		o.Annotations = keepTriggerTime(o.Annotations)
		if name, ok := o.Labels[discoveryv1.LabelServiceName]; ok {
			if len(o.Labels) > 1 {
				o.Labels = map[string]string{discoveryv1.LabelServiceName: name}
			}
		} else {
			o.Labels = nil
		}
		for i := range o.Endpoints {
			e := &o.Endpoints[i]
			e.TargetRef, e.Hostname, e.DeprecatedTopology = nil, nil, nil
		}
	case *corev1.Node:
		slimMeta(&o.ObjectMeta)
		o.Annotations = nil
		taints := o.Spec.Taints
		o.Spec = corev1.NodeSpec{Taints: taints}
		o.Status = corev1.NodeStatus{Addresses: o.Status.Addresses}
	}
	return obj, nil
}

// slimMeta drops the metadata no proxy reads.
func slimMeta(m *metav1.ObjectMeta) {
	m.ManagedFields, m.OwnerReferences, m.Finalizers, m.GenerateName = nil, nil, nil, ""
}

// keepTriggerTime returns a slice's annotations reduced to the trigger time the EndpointSlice
// controller writes (nil when absent): the network-programming latency is measured from it.
func keepTriggerTime(a map[string]string) map[string]string {
	v, ok := a[corev1.EndpointsLastChangeTriggerTime]
	if !ok {
		return nil
	}
	if len(a) == 1 {
		return a
	}
	return map[string]string{corev1.EndpointsLastChangeTriggerTime: v}
}

// keptAnnotationPrefixes are the Service annotations the model may read: nftproxy's own and
// Kubernetes' service.kubernetes.io/ keys (topology mode and hints among them).
var keptAnnotationPrefixes = []string{"nftproxy.io/", "service.kubernetes.io/", "service.beta.kubernetes.io/"}

// keepAnnotations returns the annotations under keptAnnotationPrefixes (nil when none), reusing
// the map when nothing is dropped.
func keepAnnotations(a map[string]string) map[string]string {
	drop := 0
	for k := range a {
		if !keptAnnotation(k) {
			drop++
		}
	}
	switch {
	case drop == 0:
		return a
	case drop == len(a):
		return nil
	}
	out := make(map[string]string, len(a)-drop)
	for k, v := range a {
		if keptAnnotation(k) {
			out[k] = v
		}
	}
	return out
}

func keptAnnotation(k string) bool {
	for _, p := range keptAnnotationPrefixes {
		if strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}
