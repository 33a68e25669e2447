package k8s

import (
	"sync/atomic"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
)

// ToBeDeletedTaint is the taint the cluster autoscaler puts on a node it is about to remove
// (KEP-3836). kube-proxy's /healthz fails while it is there, so load balancers stop sending new
// connections to the node before it goes.
const ToBeDeletedTaint = "ToBeDeletedByClusterAutoscaler"

// NodeDraining says why node should receive no new traffic from load balancers, "" if it should:
// it is being deleted (deletionTimestamp set) or tainted ToBeDeletedTaint. These are
// kube-proxy's rules (pkg/proxy/healthcheck, SyncNode); a cordoned node still serves.
func NodeDraining(node *corev1.Node) string {
	if node == nil {
		return ""
	}
	if node.DeletionTimestamp != nil {
		return "the Node is being deleted (deletionTimestamp " + node.DeletionTimestamp.UTC().Format("2006-01-02T15:04:05Z") + ")"
	}
	for _, t := range node.Spec.Taints {
		if t.Key == ToBeDeletedTaint {
			return "the Node is tainted " + ToBeDeletedTaint + " (the cluster autoscaler is removing it)"
		}
	}
	return ""
}

// draining remembers this node's NodeDraining verdict for the health server, and logs changes.
type draining struct {
	why atomic.Pointer[string]
}

func (d *draining) get() string {
	if p := d.why.Load(); p != nil {
		return *p
	}
	return ""
}

// set records the verdict for node (a deleted Node object counts as being deleted).
func (d *draining) set(node *corev1.Node, deleted bool, log logr.Logger) {
	why := NodeDraining(node)
	if deleted {
		why = "the Node object was deleted"
	}
	old := d.get()
	if why == old {
		return
	}
	d.why.Store(&why)
	if why != "" {
		log.Info("Node on its way out: /healthz answers 503 so load balancers drain this node; the rules keep serving", "reason", why)
	} else {
		log.Info("Node eligible for traffic again: /healthz follows the rules' state only")
	}
}
