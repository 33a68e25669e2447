package model

import (
	"net/netip"
)

// metadataAddresses are the cloud instance-metadata services (AWS, GCP, Azure, ... use the
// IPv4 one; AWS Nitro also the IPv6 one): a Service address or an endpoint there would hand the
// node's credentials to whoever the Service sends traffic to, or take them from the node's pods.
var metadataAddresses = []netip.Addr{netip.MustParseAddr("169.254.169.254"), netip.MustParseAddr("fd00:ec2::254")}

// limitedBroadcast is IPv4's all-ones address: never a unicast destination.
var limitedBroadcast = netip.AddrFrom4([4]byte{255, 255, 255, 255})

// SpecialAddress says why an address can be no Service address (cluster, external or
// load-balancer ingress IP) and no endpoint, or "" if it can be one: unspecified, loopback
// (the node's own listeners), link-local (the link's neighbours, the metadata service),
// multicast, the limited broadcast address, or a cloud metadata address. The API server refuses
// the first three for endpoints and external IPs but not for load-balancer ingress IPs, and a
// ClusterIP is only as good as the ServiceCIDR it came from: so the model checks every Service
// address with this one rule, in both modes, and manifest mode checks endpoints with it.
func SpecialAddress(a netip.Addr) string {
	a = a.Unmap()
	for _, m := range metadataAddresses {
		if a == m {
			return "may not be a cloud metadata address (169.254.169.254, fd00:ec2::254)"
		}
	}
	switch {
	case a.IsUnspecified():
		return "may not be unspecified (0.0.0.0, ::)"
	case a.IsLoopback():
		return "may not be in the loopback range (127.0.0.0/8, ::1/128)"
	case a.IsLinkLocalUnicast():
		return "may not be in the link-local range (169.254.0.0/16, fe80::/10)"
	case a.IsMulticast():
		return "may not be a multicast address (224.0.0.0/4, ff00::/8)"
	case a == limitedBroadcast:
		return "may not be the broadcast address 255.255.255.255"
	}
	return ""
}

// specialAddrs rejects a Service naming a special address in field (see SpecialAddress); do
// says what to do instead.
func specialAddrs(key ServiceKey, field, do string, addrs []netip.Addr) *Rejection {
	for _, a := range addrs {
		if why := SpecialAddress(a); why != "" {
			return reject(key, ReasonSpecialAddress,
				"%s %s %s; no Service may take it (it would capture traffic meant for the node itself or its link); %s",
				field, a, why, do)
		}
	}
	return nil
}

// clusterIPOutside returns the first cluster IP that the API server could not have allocated
// from cidrs (outside all of them, or the network address, or IPv4's broadcast address of the
// one holding it) with why, or an invalid address if all are allocatable. No cidrs: all are.
func clusterIPOutside(ips []netip.Addr, cidrs []netip.Prefix) (netip.Addr, string) {
	if len(cidrs) == 0 {
		return netip.Addr{}, ""
	}
next:
	for _, a := range ips {
		for _, p := range cidrs {
			if !p.Contains(a) {
				continue
			}
			switch {
			case a == p.Masked().Addr():
				return a, "is the network address of service CIDR " + p.Masked().String() + ", which is never allocated"
			case a.Is4() && a == lastAddr(p):
				return a, "is the broadcast address of service CIDR " + p.Masked().String() + ", which is never allocated"
			}
			continue next
		}
		return a, "is outside the service CIDRs"
	}
	return netip.Addr{}, ""
}

// lastAddr is the highest address of p (IPv4: its broadcast address).
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
