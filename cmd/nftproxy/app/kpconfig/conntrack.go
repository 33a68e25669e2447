package kpconfig

import (
	"fmt"
	"time"

	"k8s.io/kube-proxy/config/v1alpha1"
)

// Conntrack holds the conntrack settings of a KubeProxyConfiguration (or of kube-proxy's
// --conntrack-* flags) with kube-proxy's defaults applied. The daemon does not apply them: it
// keeps only CAP_NET_ADMIN, and writing the sysctls needs more. `nftproxy init`, run by a
// privileged initContainer, applies them, as kube-proxy's --init-only does.
type Conntrack struct {
	// MaxPerCore sets nf_conntrack_max to MaxPerCore × CPUs (at least Min); 0 leaves the
	// limit as it is and ignores Min. kube-proxy's default is 32768.
	MaxPerCore int32
	// Min is the least nf_conntrack_max when MaxPerCore is set; default 131072.
	Min int32
	// TCPEstablishedTimeout is nf_conntrack_tcp_timeout_established; 0 leaves it. Default 24h.
	TCPEstablishedTimeout time.Duration
	// TCPCloseWaitTimeout is nf_conntrack_tcp_timeout_close_wait; 0 leaves it. Default 1h.
	TCPCloseWaitTimeout time.Duration
	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal to 1 (out-of-window packets are not
	// INVALID); false leaves it.
	TCPBeLiberal bool
	// UDPTimeout is nf_conntrack_udp_timeout (unreplied); 0 leaves it.
	UDPTimeout time.Duration
	// UDPStreamTimeout is nf_conntrack_udp_timeout_stream (assured); 0 leaves it.
	UDPStreamTimeout time.Duration
}

// DefaultConntrack is kube-proxy's default: what an empty (or kubeadm's all-null) conntrack
// section means.
func DefaultConntrack() Conntrack {
	return Conntrack{MaxPerCore: 32 * 1024, Min: 128 * 1024, TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour}
}

// ConntrackOf applies kube-proxy's defaults to the section (a null field takes the default; a
// zero duration leaves the kernel's value, as in kube-proxy) and refuses negative values, which
// kube-proxy's validation refuses too.
func ConntrackOf(c v1alpha1.KubeProxyConntrackConfiguration) (Conntrack, error) {
	out := DefaultConntrack()
	if c.MaxPerCore != nil {
		out.MaxPerCore = *c.MaxPerCore
	}
	if c.Min != nil {
		out.Min = *c.Min
	}
	if c.TCPEstablishedTimeout != nil {
		out.TCPEstablishedTimeout = c.TCPEstablishedTimeout.Duration
	}
	if c.TCPCloseWaitTimeout != nil {
		out.TCPCloseWaitTimeout = c.TCPCloseWaitTimeout.Duration
	}
	out.TCPBeLiberal = c.TCPBeLiberal
	out.UDPTimeout = c.UDPTimeout.Duration
	out.UDPStreamTimeout = c.UDPStreamTimeout.Duration
	for _, f := range []struct {
		name string
		neg  bool
	}{
		{"conntrack.maxPerCore", out.MaxPerCore < 0},
		{"conntrack.min", out.Min < 0},
		{"conntrack.tcpEstablishedTimeout", out.TCPEstablishedTimeout < 0},
		{"conntrack.tcpCloseWaitTimeout", out.TCPCloseWaitTimeout < 0},
		{"conntrack.udpTimeout", out.UDPTimeout < 0},
		{"conntrack.udpStreamTimeout", out.UDPStreamTimeout < 0},
	} {
		if f.neg {
			return out, fmt.Errorf("%s is negative: give 0 to leave the kernel's value, or a positive value", f.name)
		}
	}
	return out, nil
}
