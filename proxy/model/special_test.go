package model

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// The special-address plan of these tests: a pod bridge's gateway addresses, which the kernel
// holds but the Node object does not list.
const (
	bridgeV4 = "198.18.0.1"
	bridgeV6 = "fd00:18::1"
)

func withClusterIP(ip string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = ip, []string{ip} }
}

// TestGuardKernelAddressClusterIP: a cluster IP the kernel holds but the Node object does not
// list (a pod bridge's gateway) gets the node-address rules of every other Service address:
// all-ports, a range or a reserved port there would capture the node's own ports (SSH on the
// gateway, from every pod). On main the guard ignored kernel-only addresses for cluster IPs.
func TestGuardKernelAddressClusterIP(t *testing.T) {
	allPorts := annotate(annotation.AllPortsKey, "true")
	anyPort := withPorts(tcpPort("any", 1, intstr.IntOrString{}))
	tests := []struct {
		name   string
		svc    *corev1.Service
		reason string
	}{
		{"all-ports on the bridge gateway IPv4", svcFixture("a", anyPort, allPorts, withClusterIP(bridgeV4)), ReasonNodeAddressRange},
		{"all-ports on the bridge gateway IPv6", svcFixture("a", anyPort, allPorts, withClusterIP(bridgeV6)), ReasonNodeAddressRange},
		{"range on the bridge gateway", svcFixture("a", withPorts(tcpPort("p", 1000, intstr.IntOrString{})),
			annotate(annotation.PortRangesKey, "p=1000-2000"), withClusterIP(bridgeV4)), ReasonNodeAddressRange},
		{"ssh on the bridge gateway", svcFixture("a", withPorts(tcpPort("ssh", 22, intstr.IntOrString{})), withClusterIP(bridgeV4)), ReasonReservedPort},
		{"single port on the bridge gateway", svcFixture("a", withClusterIP(bridgeV4)), "accepted"},
		{"all-ports elsewhere", svcFixture("a", anyPort, allPorts, withClusterIP("10.96.0.77")), "accepted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := guardTracker(t, &recorder{})
			tr.SetLocalAddresses([]netip.Addr{addr(nodeV6), addr("127.0.0.1"), addr(bridgeV4), addr(bridgeV6)})
			tr.UpsertService(tc.svc)
			if got := reasonOf(tr, "a"); got != tc.reason {
				t.Fatalf("got %s (%+v); want %s", got, tr.Service(keyOf("a")).Rejected, tc.reason)
			}
		})
	}
}

// TestGuardKernelAddressLater: an address the kernel takes after the Service was accepted (an
// interface brought up after start) rejects the all-ports cluster IP on it, and gives it back
// when the address goes; only that Service is rebuilt.
func TestGuardKernelAddressLater(t *testing.T) {
	rec := &recorder{}
	tr := guardTracker(t, rec)
	tr.UpsertService(svcFixture("gw", withPorts(tcpPort("any", 1, intstr.IntOrString{})),
		annotate(annotation.AllPortsKey, "true"), withClusterIP(bridgeV4)))
	tr.UpsertService(svcFixture("other", withClusterIP("10.96.0.20")))
	if got := reasonOf(tr, "gw"); got != "accepted" {
		t.Fatalf("before: %s; want accepted", got)
	}
	tr.TakeChanges()
	rec.take()
	tr.SetLocalAddresses([]netip.Addr{addr(nodeV6), addr(bridgeV4)})
	if got := reasonOf(tr, "gw"); got != ReasonNodeAddressRange {
		t.Fatalf("after the bridge got %s: %s; want %s", bridgeV4, got, ReasonNodeAddressRange)
	}
	if ch := tr.TakeChanges(); !reflect.DeepEqual(ch.Services, []ServiceKey{keyOf("gw")}) {
		t.Fatalf("changes = %v; want only ns/gw rebuilt", ch.Services)
	}
	if got := rec.take(); !reflect.DeepEqual(got, []string{"ns/gw " + ReasonNodeAddressRange}) {
		t.Fatalf("events = %v", got)
	}
	tr.SetLocalAddresses([]netip.Addr{addr(nodeV6)})
	if got := reasonOf(tr, "gw"); got != "accepted" {
		t.Fatalf("after the address left: %s; want accepted", got)
	}
}

// TestSpecialServiceAddresses: no Service address may be a special address, whichever field
// names it, in either mode (FromService is Kubernetes mode's conversion too). On main a
// loopback load-balancer ingress IP and every special cluster IP were accepted.
func TestSpecialServiceAddresses(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*corev1.Service)
		want string
	}{
		{"cluster IP 0.0.0.0", withClusterIP("0.0.0.0"), ReasonSpecialAddress},
		{"cluster IP ::", withClusterIP("::"), ReasonSpecialAddress},
		{"cluster IP 127.0.0.1", withClusterIP("127.0.0.1"), ReasonSpecialAddress},
		{"cluster IP ::1", withClusterIP("::1"), ReasonSpecialAddress},
		{"cluster IP metadata", withClusterIP("169.254.169.254"), ReasonSpecialAddress},
		{"cluster IP link-local v6", withClusterIP("fe80::1"), ReasonSpecialAddress},
		{"cluster IP multicast", withClusterIP("224.0.0.1"), ReasonSpecialAddress},
		{"cluster IP multicast v6", withClusterIP("ff02::1"), ReasonSpecialAddress},
		{"cluster IP broadcast", withClusterIP("255.255.255.255"), ReasonSpecialAddress},
		{"cluster IP metadata v6", withClusterIP("fd00:ec2::254"), ReasonSpecialAddress},
		{"loopback LB ingress", lbIngress("127.0.0.1"), ReasonSpecialAddress},
		{"link-local LB ingress", lbIngress("198.51.100.1", "169.254.10.1"), ReasonSpecialAddress},
		{"loopback external IP", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"127.0.0.53"} }, ReasonSpecialAddress},
		{"ordinary", lbIngress("198.51.100.1"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conv := FromService(svcFixture("a", tc.mod), nil)
			got := ""
			if conv.Service == nil {
				t.Fatalf("no Service: %+v", conv)
			}
			if r := conv.Service.Rejected; r != nil {
				got = r.Reason
			}
			if got != tc.want {
				t.Fatalf("reason %q (%+v); want %q", got, conv.Service.Rejected, tc.want)
			}
			if r := conv.Service.Rejected; r != nil && !strings.HasPrefix(r.Message, "service ns/a: ") {
				t.Fatalf("message %q does not start with the Service", r.Message)
			}
		})
	}
	// The message names the field and the address, and says what to do.
	conv := FromService(svcFixture("a", lbIngress("127.0.0.1")), nil)
	want := "service ns/a: status.loadBalancer.ingress IP 127.0.0.1 may not be in the loopback range (127.0.0.0/8, ::1/128); no Service may take it"
	if r := conv.Service.Rejected; r == nil || !strings.HasPrefix(r.Message, want) || !strings.Contains(r.Message, "load-balancer controller") {
		t.Fatalf("rejection %+v; want a message starting %q and naming the load-balancer controller", r, want)
	}
}

// TestClusterIPServiceCIDR: with service CIDRs configured (manifest mode's --service-cidr), a
// cluster IP must be one the API server could allocate from them; without, any non-special one
// is accepted. On main a pod's IP as cluster IP was programmed.
func TestClusterIPServiceCIDR(t *testing.T) {
	cidrs := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:96::/112")}
	tests := []struct {
		ip   string
		want string
	}{
		{"10.96.0.10", "accepted"},
		{"10.96.0.1", "accepted"},
		{"10.96.255.254", "accepted"},
		{"fd00:96::ffff", "accepted"}, // IPv6 has no broadcast: its last address is allocatable
		{"10.244.1.5", ReasonClusterIPOutsideServiceCIDR},
		{"10.96.0.0", ReasonClusterIPOutsideServiceCIDR},
		{"10.96.255.255", ReasonClusterIPOutsideServiceCIDR},
		{"fd00:96::", ReasonClusterIPOutsideServiceCIDR},
		{"fd00:97::1", ReasonClusterIPOutsideServiceCIDR},
	}
	for _, withCIDRs := range []bool{true, false} {
		for _, tc := range tests {
			t.Run(tc.ip, func(t *testing.T) {
				g := GuardConfig{}
				want := "accepted"
				if withCIDRs {
					g.ServiceCIDRs, want = cidrs, tc.want
				}
				tr := NewTracker(TrackerConfig{Logger: logr.Discard(), Guard: g})
				tr.UpsertService(svcFixture("a", withClusterIP(tc.ip)))
				got := reasonOf(tr, "a")
				if got != want {
					t.Fatalf("service CIDRs %v: %s (%+v); want %s", g.ServiceCIDRs, got, tr.Service(keyOf("a")).Rejected, want)
				}
				// The message names the flag's CIDRs, so the operator sees what the address missed.
				if r := tr.Service(keyOf("a")).Rejected; r != nil && !strings.Contains(r.Message, "(--service-cidr 10.96.0.0/16,fd00:96::/112)") {
					t.Fatalf("message %q; want it to name --service-cidr 10.96.0.0/16,fd00:96::/112", r.Message)
				}
			})
		}
	}
}

// TestSpecialAddressMapped: an IPv4-mapped IPv6 address is the IPv4 address it maps (the kernel
// delivers it so on a dual-stack socket), so it is special exactly when that address is. Manifest
// mode checks the addresses it parses with SpecialAddress directly.
func TestSpecialAddressMapped(t *testing.T) {
	for _, s := range []string{"::ffff:169.254.169.254", "::ffff:127.0.0.1", "::ffff:0.0.0.0", "::ffff:255.255.255.255"} {
		if why := SpecialAddress(netip.MustParseAddr(s)); why == "" {
			t.Errorf("SpecialAddress(%s) = \"\"; want it refused as %s is", s, netip.MustParseAddr(s).Unmap())
		}
	}
	if why := SpecialAddress(netip.MustParseAddr("::ffff:198.51.100.1")); why != "" {
		t.Errorf("SpecialAddress(::ffff:198.51.100.1) = %q; want \"\"", why)
	}
}
