// Package sysctl sets the conntrack sysctls kube-proxy sets (its --init-only step): the table
// size from a per-core figure with a floor, the TCP established and close-wait timeouts, TCP
// liberal tracking and the UDP timeouts. They need a writable /proc/sys, which a container gets
// only when privileged, so `nftproxy init` runs them from a privileged initContainer and the
// daemon itself keeps only CAP_NET_ADMIN.
//
// The values come in a plain struct (Conntrack) so that flags and kube-proxy's
// KubeProxyConfiguration (its conntrack section) fill the same thing.
package sysctl

import (
	"time"
)

// Conntrack is kube-proxy's KubeProxyConntrackConfiguration in plain values. A zero field
// leaves its sysctl as the kernel has it, as in kube-proxy.
type Conntrack struct {
	// MaxPerCore is nf_conntrack_max per CPU (0: leave nf_conntrack_max alone and ignore Min).
	MaxPerCore int32
	// Min is the least nf_conntrack_max, whatever MaxPerCore × CPUs gives.
	Min int32
	// TCPEstablishedTimeout is nf_conntrack_tcp_timeout_established (0: leave it).
	TCPEstablishedTimeout time.Duration
	// TCPCloseWaitTimeout is nf_conntrack_tcp_timeout_close_wait (0: leave it).
	TCPCloseWaitTimeout time.Duration
	// TCPBeLiberal sets nf_conntrack_tcp_be_liberal to 1 (false: leave it; it is never reset to 0).
	TCPBeLiberal bool
	// UDPTimeout is nf_conntrack_udp_timeout, for unreplied UDP flows (0: leave it).
	UDPTimeout time.Duration
	// UDPStreamTimeout is nf_conntrack_udp_timeout_stream, for assured UDP flows (0: leave it).
	UDPStreamTimeout time.Duration
}

// Defaults are kube-proxy's defaults (v1alpha1 SetDefaults_KubeProxyConfiguration): 32768 per
// core with a floor of 131072, established TCP 24 h, close-wait 1 h, the rest left alone.
func Defaults() Conntrack {
	return Conntrack{
		MaxPerCore:            32 * 1024,
		Min:                   128 * 1024,
		TCPEstablishedTimeout: 24 * time.Hour,
		TCPCloseWaitTimeout:   time.Hour,
	}
}

// Max is the nf_conntrack_max these values ask for on a machine of cpus CPUs: MaxPerCore × cpus,
// at least Min; 0 (leave it) when MaxPerCore is 0 or negative, as in kube-proxy.
func (c Conntrack) Max(cpus int) int {
	if c.MaxPerCore <= 0 {
		return 0
	}
	scaled := int(c.MaxPerCore) * cpus
	if floor := int(c.Min); scaled <= floor {
		return floor
	}
	return scaled
}

// Setting is one sysctl to write: its name under net/netfilter and the value.
type Setting struct {
	Name  string
	Value int
}

// Settings lists what c asks for on a machine of cpus CPUs, in kube-proxy's order: the table
// size first, then the timeouts and the TCP mode. Durations are written in whole seconds.
func (c Conntrack) Settings(cpus int) []Setting {
	var out []Setting
	if m := c.Max(cpus); m > 0 {
		out = append(out, Setting{MaxName, m})
	}
	secs := func(name string, d time.Duration) {
		if d > 0 {
			out = append(out, Setting{name, int(d / time.Second)})
		}
	}
	secs("nf_conntrack_tcp_timeout_established", c.TCPEstablishedTimeout)
	secs("nf_conntrack_tcp_timeout_close_wait", c.TCPCloseWaitTimeout)
	if c.TCPBeLiberal {
		out = append(out, Setting{"nf_conntrack_tcp_be_liberal", 1})
	}
	secs("nf_conntrack_udp_timeout", c.UDPTimeout)
	secs("nf_conntrack_udp_timeout_stream", c.UDPStreamTimeout)
	return out
}

// MaxName is the table-size sysctl. Unlike the timeouts it is not per network namespace: the
// kernel lets only the initial namespace write it (read-only elsewhere).
const MaxName = "nf_conntrack_max"
