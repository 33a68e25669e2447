package lab

import (
	"net/netip"
	"testing"
)

func TestAddressPlan(t *testing.T) {
	tests := []struct {
		name string
		got  netip.Addr
		want string
	}{
		{"pod-1 v4", PodIPv4(1), "198.18.128.11"},
		{"pod-1 v6", PodIPv6(1), "fd00:128::11"},
		{"pod-12 v6", PodIPv6(12), "fd00:128::22"},
		{"client-1 v4", ClientIPv4(1), "198.18.1.2"},
		{"client-2 v6", ClientIPv6(2), "fd00:2::2"},
		{"client-2 gateway v4", ClientGatewayV4(2), "198.18.2.1"},
		{"client-2 gateway v6", ClientGatewayV6(2), "fd00:2::1"},
		{"cluster ip v4", ClusterIPv4(7), "198.19.0.7"},
		{"cluster ip v6", ClusterIPv6(7), "fd00:19::7"},
		{"lb v4", LoadBalancerIPv4(3), "198.19.100.3"},
		{"lb v6", LoadBalancerIPv6(3), "fd00:19:100::3"},
		{"external v4", ExternalIPv4(9), "198.19.200.9"},
		{"external v6", ExternalIPv6(9), "fd00:19:200::9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got.String() != tt.want {
				t.Errorf("got %s, want %s", tt.got, tt.want)
			}
		})
	}
}

// The service ranges must not overlap: an unallocated-ClusterIP drop over the service CIDR
// would otherwise swallow LoadBalancer and external IPs.
func TestAddressPlanRangesDisjoint(t *testing.T) {
	ranges := []string{
		UplinkCIDRv4, PodCIDRv4, ServiceCIDRv4, LoadBalancerCIDRv4, ExternalIPCIDRv4, "198.18.1.0/24",
		UplinkCIDRv6, PodCIDRv6, ServiceCIDRv6, LoadBalancerCIDRv6, ExternalIPCIDRv6, "fd00:1::/64",
	}
	for i, a := range ranges {
		for _, b := range ranges[i+1:] {
			pa, pb := netip.MustParsePrefix(a), netip.MustParsePrefix(b)
			if pa.Overlaps(pb) {
				t.Errorf("%s overlaps %s, want disjoint", a, b)
			}
		}
	}
	in := []struct {
		addr   netip.Addr
		prefix string
	}{
		{ClusterIPv4(254), ServiceCIDRv4}, {ClusterIPv6(254), ServiceCIDRv6},
		{LoadBalancerIPv4(1), LoadBalancerCIDRv4}, {LoadBalancerIPv6(254), LoadBalancerCIDRv6},
		{ExternalIPv4(1), ExternalIPCIDRv4}, {ExternalIPv6(254), ExternalIPCIDRv6},
		{PodIPv4(MaxPods), PodCIDRv4}, {PodIPv6(MaxPods), PodCIDRv6},
	}
	for _, tt := range in {
		if !netip.MustParsePrefix(tt.prefix).Contains(tt.addr) {
			t.Errorf("%s is outside %s, want inside", tt.addr, tt.prefix)
		}
	}
}

func TestAddressPlanIndexOutOfRange(t *testing.T) {
	tests := []struct {
		name string
		fn   func()
	}{
		{"pod 0", func() { PodIPv4(0) }},
		{"pod past max", func() { PodIPv6(MaxPods + 1) }},
		{"client past max", func() { ClientIPv4(MaxClients + 1) }},
		{"cluster ip 255", func() { ClusterIPv4(255) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("got no panic, want a panic for an index outside the plan")
				}
			}()
			tt.fn()
		})
	}
}

func TestParseReply(t *testing.T) {
	tests := []struct {
		line    string
		want    Reply
		wantErr bool
	}{
		{
			line: "pod=pod-1 proto=tcp port=80 to=198.18.128.11 from=198.18.1.2:40122\n",
			want: Reply{Pod: "pod-1", Proto: "tcp", Port: 80, To: PodIPv4(1), From: netip.MustParseAddrPort("198.18.1.2:40122")},
		},
		{
			line: "pod=pod-2 proto=udp port=16384 to=fd00:128::12 from=[fd00:1::2]:5353",
			want: Reply{Pod: "pod-2", Proto: "udp", Port: 16384, To: PodIPv6(2), From: netip.MustParseAddrPort("[fd00:1::2]:5353")},
		},
		{line: "", wantErr: true},
		{line: "hello world", wantErr: true},
		{line: "pod=a proto=tcp port=99999 to=198.18.128.11 from=198.18.1.2:1", wantErr: true},
		{line: "pod=a proto=tcp port=80 to=nope from=198.18.1.2:1", wantErr: true},
		{line: "pod=a pod=b port=80 to=198.18.128.11 from=198.18.1.2:1", wantErr: true},
		{line: "pod=a proto=tcp port=80 to=198.18.128.11 via=198.18.1.2:1", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			got, err := ParseReply(tt.line)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseReply(%q) error = %v, want error %v", tt.line, err, tt.wantErr)
			}
			if !tt.wantErr && got != tt.want {
				t.Errorf("ParseReply(%q) = %+v, want %+v", tt.line, got, tt.want)
			}
			if !tt.wantErr {
				if back, _ := ParseReply(got.String()); back != got {
					t.Errorf("round trip: got %+v, want %+v", back, got)
				}
			}
		})
	}
}
