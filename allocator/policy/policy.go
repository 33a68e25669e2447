// Package policy is nftproxy's one node-port policy: which Services get node ports and
// node-port blocks, when a port or block a Service held is kept (KEP-1864), what a block is
// (identity-mapped: the port range itself), the default ranges, and how each refusal is worded.
// Manifest mode's control plane (proxy/nodeport) and the cluster controller
// (allocator/controller) both call it, so a rule changed here changes in both, and the two
// report the same refusal in the same words.
//
// The allocator package below it knows nothing of Services; this package is where Services
// meet it.
package policy

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// DefaultNodePortRange is the API server's default --service-node-port-range.
const DefaultNodePortRange = "30000-32767"

// DefaultBlockRange is the default range of node-port blocks (--range-node-port-range). Blocks
// are identity-mapped, so this is the set of ports a Service may open on every node address: it
// holds no Kubernetes or common node-agent port (the former 1024-29999 held etcd's 2379, the API
// server's 6443 and the kubelet's 10250), and lies below the default node-port range (so the two
// never overlap) and below the kernel's default ephemeral range (32768-60999).
const DefaultBlockRange = "20000-29999"

// HasNodePorts reports whether a Service has node ports at all: type NodePort or LoadBalancer,
// not headless (the proxies ignore headless Services), and not all-ports (KEP-2610: an
// all-ports Service never gets node ports, and the proxies never program any it carries).
// A Service that has none holds no node port or block: what it held is released. (Its
// health-check node port follows NeedsHealthCheck.)
func HasNodePorts(svc *corev1.Service) bool {
	t := svc.Spec.Type
	return (t == corev1.ServiceTypeNodePort || t == corev1.ServiceTypeLoadBalancer) &&
		svc.Spec.ClusterIP != corev1.ClusterIPNone && !allPorts(svc)
}

// allPorts: the all-ports annotation reads "true". A value that does not parse counts as not
// all-ports; the proxies reject such a Service with its own reason.
func allPorts(svc *corev1.Service) bool {
	v, ok := svc.Annotations[annotation.AllPortsKey]
	if !ok {
		return false
	}
	b, err := annotation.ParseBool(v)
	return err == nil && b
}

// AllocatesNew reports whether node ports and blocks the Service does not name may be handed
// out (KEP-1864: not for a LoadBalancer Service with allocateLoadBalancerNodePorts: false;
// ports and blocks it names explicitly are still reserved).
func AllocatesNew(svc *corev1.Service) bool {
	if !HasNodePorts(svc) {
		return false
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.AllocateLoadBalancerNodePorts != nil {
		return *svc.Spec.AllocateLoadBalancerNodePorts
	}
	return true
}

// KeepsHeld reports whether a node port or block the Service held is kept. named: the Service
// still names it (nodePort equal to it, or a node-port-ranges entry equal to it). An unnamed
// one is kept only while the Service allocates: the API server patches a missing nodePort from
// the old object only then, and KEP-1864 says that with allocateLoadBalancerNodePorts: false
// removing nodePort from a port releases it (turning allocation off takes nothing away, but the
// user can drop what it holds).
func KeepsHeld(svc *corev1.Service, named bool) bool {
	return HasNodePorts(svc) && (named || AllocatesNew(svc))
}

// NeedsHealthCheck: the API server gives a health-check node port to LoadBalancer Services with
// externalTrafficPolicy: Local, whatever allocateLoadBalancerNodePorts says, all-ports ones
// included: the node serves it (it forwards nothing), and the load balancer needs it.
func NeedsHealthCheck(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.ClusterIP != corev1.ClusterIPNone &&
		svc.Spec.ExternalTrafficPolicy == corev1.ServiceExternalTrafficPolicyLocal
}

// Block is the span of ports a port-ranges or node-port-ranges entry names. The node-port block
// of a ranged port is Block of its own range, node port p reaching port p (RTP/SDP advertise
// the real port): the only mapping nftproxy programs, since a shifted one cannot be written
// faithfully in nftables (README.md). A recorded entry whose Block differs is shifted.
func Block(entry annotation.PortRange) allocator.Range {
	return allocator.Range{First: int(entry.Start), Last: int(entry.End)}
}

// BlockOwner is the allocator owner of the block of port of Service key ("namespace/name"), so
// a refusal can name the holder's Service and port.
func BlockOwner(key, port string) string { return key + "/" + port }

// HolderOf returns the "namespace/name" of an allocator owner: a block owner
// "namespace/name/port", or a single node port's owner "namespace/name" as it is.
func HolderOf(owner string) string {
	if strings.Count(owner, "/") < 2 {
		return owner
	}
	return owner[:strings.LastIndexByte(owner, '/')]
}

// CheckDisjoint refuses a block range that overlaps the node-port range: a block could then
// take a node port the API server (or manifest mode) hands to an ordinary Service.
func CheckDisjoint(blocks, nodePorts allocator.Range) error {
	if blocks.Overlaps(nodePorts) {
		return fmt.Errorf("node-port block range %s (--range-node-port-range) overlaps the node-port range %s "+
			"(--service-node-port-range): a block would take node ports handed to other Services; choose disjoint "+
			"ranges (for example %s with %s)", blocks, nodePorts, DefaultBlockRange, DefaultNodePortRange)
	}
	return nil
}
