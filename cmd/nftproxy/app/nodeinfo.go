package app

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// nodeWait bounds the wait for this Node (and its pod CIDRs) at start, as kube-proxy's: after
// it the daemon exits and the kubelet restarts it, which shows in the pod's status.
const nodeWait = 5 * time.Minute

// resolveFromNode reads this Node once at start when --detect-local-mode NodeCIDR or
// --nodeport-addresses primary needs it, as kube-proxy does, and sets the cluster CIDRs (the
// Node's spec.podCIDRs) or the node-port CIDRs (its primary address of each family). In
// Kubernetes mode it waits until the Node exists and has pod CIDRs; in manifest mode the Node
// manifest must be in the directory. A Node's pod CIDRs cannot change once set (the API server
// refuses it); its addresses are read once, as kube-proxy's.
func (o *Options) resolveFromNode(ctx context.Context, log logr.Logger) error {
	nodeCIDR := o.DetectLocalMode == detectNodeCIDR
	if !nodeCIDR && !o.NodePortPrimary {
		return nil
	}
	why := "--detect-local-mode NodeCIDR"
	if !nodeCIDR {
		why = "--nodeport-addresses primary"
	} else if o.NodePortPrimary {
		why += " and --nodeport-addresses primary"
	}
	if o.NodeName == "" {
		return usageError{fmt.Errorf("%s needs the node's name: pass --hostname-override", why)}
	}
	var n *corev1.Node
	var err error
	switch {
	case o.Manifests != "":
		n, err = o.manifestNode()
	case o.kubeMode():
		n, err = o.waitAPINode(ctx, log, why, nodeCIDR)
	default:
		err = usageError{fmt.Errorf("%s needs this Node: pass --manifests or --kubeconfig", why)}
	}
	if err != nil {
		return err
	}
	cidrs, primary, err := nodeSettings(n)
	if err != nil {
		return err
	}
	if nodeCIDR {
		if len(cidrs) == 0 {
			return fmt.Errorf("--detect-local-mode NodeCIDR: Node %s has no spec.podCIDRs (is the controller-manager's --allocate-node-cidrs on?); use --detect-local-mode ClusterCIDR with --cluster-cidr instead", n.Name)
		}
		o.ClusterCIDRs = cidrs
	}
	if o.NodePortPrimary {
		if len(primary) == 0 {
			return fmt.Errorf("--nodeport-addresses primary: Node %s has no InternalIP or ExternalIP in its status", n.Name)
		}
		// The CIDRs given beside primary add to it, as kube-proxy expands the word in place.
		o.NodePortCIDRs = append(primary, o.nodePortBeside...)
	}
	log.Info("read from this Node at start", "node", n.Name, "why", why, "clusterCIDRs", o.ClusterCIDRs.String(), "nodePortAddresses", o.NodePortCIDRs.String())
	return nil
}

// nodeSettings returns the Node's pod CIDRs and its primary address of each family as host
// prefixes: per family the first InternalIP, else the first ExternalIP (kube-proxy's choice).
func nodeSettings(n *corev1.Node) (cidrs, primary prefixList, err error) {
	pods := n.Spec.PodCIDRs
	if len(pods) == 0 && n.Spec.PodCIDR != "" {
		pods = []string{n.Spec.PodCIDR}
	}
	for _, c := range pods {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return nil, nil, fmt.Errorf("Node %s: spec.podCIDRs %q: %w", n.Name, c, err)
		}
		cidrs = append(cidrs, p.Masked())
	}
	for _, v6 := range []bool{false, true} {
		var found bool
		for _, typ := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
			for _, a := range n.Status.Addresses {
				ip, err := netip.ParseAddr(a.Address)
				if found || a.Type != typ || err != nil || ip.Unmap().Is6() != v6 {
					continue
				}
				ip = ip.Unmap()
				primary = append(primary, netip.PrefixFrom(ip, ip.BitLen()))
				found = true
			}
		}
	}
	return cidrs, primary, nil
}

// manifestNode is this Node from the manifest directory.
func (o *Options) manifestNode() (*corev1.Node, error) {
	objs, ferrs := o.loader().Load(o.Manifests)
	for _, n := range objs.Nodes {
		if n.Name == o.NodeName {
			return n, nil
		}
	}
	var err error
	for _, e := range ferrs {
		err = errors.Join(err, e)
	}
	return nil, fmt.Errorf("no Node named %q in %s (needed by --detect-local-mode NodeCIDR or --nodeport-addresses primary): add its manifest%s", o.NodeName, o.Manifests, joinedErr(err))
}

func joinedErr(err error) string {
	if err == nil {
		return ""
	}
	return "; reading the directory: " + err.Error()
}

// waitAPINode lists this Node (the ClusterRole grants list, not get) until it exists and, for
// NodeCIDR, has pod CIDRs; at most nodeWait.
func (o *Options) waitAPINode(ctx context.Context, log logr.Logger, why string, needCIDRs bool) (*corev1.Node, error) {
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client for %s: %w", cfg.Host, err)
	}
	ctx, cancel := context.WithTimeout(ctx, nodeWait)
	defer cancel()
	sel := fields.OneTermEqualSelector("metadata.name", o.NodeName).String()
	var last string
	for {
		l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: sel})
		var msg string
		switch {
		case err != nil:
			msg = "cannot list the Node: " + err.Error()
		case len(l.Items) == 0:
			msg = "the Node does not exist yet"
		case needCIDRs && len(l.Items[0].Spec.PodCIDRs) == 0 && l.Items[0].Spec.PodCIDR == "":
			msg = "the Node has no spec.podCIDRs yet"
		default:
			return &l.Items[0], nil
		}
		if msg != last {
			log.Info("waiting for this Node", "node", o.NodeName, "why", why, "state", msg)
			last = msg
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s: gave up after %v waiting for Node %s: %s", why, nodeWait, o.NodeName, msg)
		case <-time.After(time.Second):
		}
	}
}
