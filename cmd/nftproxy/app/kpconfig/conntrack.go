package kpconfig

import (
	"fmt"

	"k8s.io/kube-proxy/config/v1alpha1"

	"github.com/nftproxy/nftproxy/proxy/sysctl"
)

// Conntrack holds the conntrack settings of a KubeProxyConfiguration (or of kube-proxy's
// --conntrack-* flags) with kube-proxy's defaults applied: proxy/sysctl's type, which `nftproxy
// init` applies. The daemon does not apply them: it keeps only CAP_NET_ADMIN, and writing the
// sysctls needs more; a privileged initContainer runs init, as kube-proxy's --init-only.
type Conntrack = sysctl.Conntrack

// DefaultConntrack is kube-proxy's default: what an empty (or kubeadm's all-null) conntrack
// section means.
func DefaultConntrack() Conntrack { return sysctl.Defaults() }

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
