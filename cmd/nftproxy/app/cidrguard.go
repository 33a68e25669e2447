package app

import (
	"fmt"
	"net/netip"
	"sync"
)

// checkServiceCIDRs refuses a --service-cidr that contains one of the node's own addresses. A
// Service CIDR legitimately holds nothing the node holds (kube-proxy's IPVS mode puts ClusterIPs on
// kube-ipvs0, but nftproxy does not run beside it on the same addresses), so such a flag is a
// mistake: it is not the API server's --service-cluster-ip-range, and the API server may give one
// of the node's addresses to a Service. The ruleset's drop of unallocated Service addresses skips
// the node's own addresses (fib daddr type local), so even a CIDR that slips through (an address
// gained later) never cuts the node off. whose says where addrs come from, for the message.
//
// --cluster-cidr is not checked: a pod CIDR holds node addresses by design (the pod bridge's
// gateway, flannel.1, Calico's tunnel address; on flat networks such as Azure CNI the node's own
// subnet), and it only decides which traffic is masqueraded or short-circuited, never dropped.
func checkServiceCIDRs(cidrs prefixList, addrs []netip.Addr, whose string) error {
	for _, p := range cidrs {
		for _, a := range addrs {
			if p.Contains(a.Unmap()) {
				return fmt.Errorf("--service-cidr %s contains %s, an address of this node (%s): a Service CIDR never holds the node's addresses, and the API server may give one to a Service; give the cluster's Service CIDR (the API server's --service-cluster-ip-range), which must not overlap the node's networks", p, a, whose)
			}
		}
	}
	return nil
}

// nodeAddressesOrigin names where the tracker's node addresses come from, for the message.
const nodeAddressesOrigin = "its Node object's or one the kernel holds"

// readyAfterCIDRCheck holds the daemon's first sync back until the sources are ready, and then
// checks --service-cidr once against the node's addresses as the model knows them (the Node
// object's, which only the source delivers, and the kernel's): on an overlap it calls refuse and
// never reports ready, so nothing is programmed.
func readyAfterCIDRCheck(ready func() bool, cidrs prefixList, addrs func() []netip.Addr, refuse func(error)) func() bool {
	var mu sync.Mutex
	var checked, refused bool
	return func() bool {
		if !ready() {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if !checked {
			checked = true
			if err := checkServiceCIDRs(cidrs, addrs(), nodeAddressesOrigin); err != nil {
				refused = true
				refuse(err)
			}
		}
		return !refused
	}
}
