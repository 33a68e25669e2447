package kpconfig

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// Setting is one nftproxy flag a field of the file sets; the value is written as on the command
// line, so the flag's own parser checks it.
type Setting struct {
	Field string // the field's path in the file, e.g. nftables.masqueradeBit
	Flag  string // the flag's name without dashes
	Value string
}

// Note is a field nftproxy does not apply, and why.
type Note struct {
	Field string
	Why   string
}

func (n Note) String() string { return n.Field + ": " + n.Why }

// Translation is what a KubeProxyConfiguration means for nftproxy.
type Translation struct {
	// Settings are the flags the file sets, in the file's field order.
	Settings []Setting
	// Warnings are fields nftproxy ignores because they cannot change what the node does here
	// (another mode's section, Windows settings, client tuning); each is logged at start.
	Warnings []Note
	// Refused are fields nftproxy cannot honour: starting anyway would make the node behave
	// otherwise than the file says, so the daemon does not start.
	Refused []Note
	// Conntrack is the conntrack section with kube-proxy's defaults, applied by `nftproxy init`.
	Conntrack Conntrack
}

// Err is nil when nothing is refused, else one error naming every refused field.
func (t Translation) Err() error {
	if len(t.Refused) == 0 {
		return nil
	}
	var msgs []string
	for _, n := range t.Refused {
		msgs = append(msgs, n.String())
	}
	return fmt.Errorf("KubeProxyConfiguration: %d field(s) nftproxy cannot honour:\n  %s", len(msgs), strings.Join(msgs, "\n  "))
}

func (t *Translation) set(field, flag, value string) {
	t.Settings = append(t.Settings, Setting{Field: field, Flag: flag, Value: value})
}
func (t *Translation) warn(field, format string, a ...any) {
	t.Warnings = append(t.Warnings, Note{Field: field, Why: fmt.Sprintf(format, a...)})
}
func (t *Translation) refuse(field, format string, a ...any) {
	t.Refused = append(t.Refused, Note{Field: field, Why: fmt.Sprintf(format, a...)})
}

// kube-proxy's ports (k8s.io/kubernetes/pkg/cluster/ports), the defaults of the bind addresses.
const (
	healthzPort = "10256"
	metricsPort = "10249"
)

// Translate maps every field of c. It reads the mode's section as kube-proxy does: nftables mode
// takes masqueradeBit, masqueradeAll and the sync periods from the nftables section; iptables
// mode (also an empty mode, kube-proxy's default on Linux) from the iptables section; ipvs mode
// the masquerade settings from the iptables section and the periods from the ipvs section.
func Translate(c *v1alpha1.KubeProxyConfiguration) Translation {
	var t Translation
	t.featureGates(c.FeatureGates)
	t.client(c)
	t.logging(c)
	t.servers(c)
	t.mode(c)
	t.local(c)
	t.other(c)
	ct, err := ConntrackOf(c.Conntrack)
	if err != nil {
		t.refuse("conntrack", "%v", err)
	}
	t.Conntrack = ct
	return t
}

func (t *Translation) featureGates(g map[string]bool) {
	names := make([]string, 0, len(g))
	for n := range g {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.warn("featureGates."+n, "ignored (%v): nftproxy has no feature gates, its behaviour is fixed and described in its README", g[n])
	}
}

func (t *Translation) client(c *v1alpha1.KubeProxyConfiguration) {
	cc := c.ClientConnection
	if cc.Kubeconfig != "" {
		t.set("clientConnection.kubeconfig", "kubeconfig", cc.Kubeconfig)
	}
	if cc.ContentType != "" || cc.AcceptContentTypes != "" {
		t.warn("clientConnection.contentType", "ignored: nftproxy asks the API server for protobuf and accepts JSON")
	}
	if cc.QPS != 0 || cc.Burst != 0 {
		t.warn("clientConnection.qps", "ignored: nftproxy's client allows 20 requests per second, burst 40 (informers list once, then watch)")
	}
}

func (t *Translation) logging(c *v1alpha1.KubeProxyConfiguration) {
	l := c.Logging
	if l.Verbosity != 0 {
		t.set("logging.verbosity", "v", strconv.FormatUint(uint64(l.Verbosity), 10))
	}
	switch l.Format {
	case "", "text":
	default:
		t.warn("logging.format", "ignored (%q): nftproxy logs text (klog's format)", l.Format)
	}
	if l.FlushFrequency.Duration.Duration != 0 {
		t.warn("logging.flushFrequency", "ignored: nftproxy writes every log line at once")
	}
	if len(l.VModule) > 0 {
		t.warn("logging.vmodule", "ignored: nftproxy has one verbosity (logging.verbosity, -v)")
	}
	o := l.Options
	if o.Text.SplitStream || o.JSON.SplitStream || !o.Text.InfoBufferSize.IsZero() || !o.JSON.InfoBufferSize.IsZero() {
		t.warn("logging.options", "ignored: nftproxy writes every log line to stderr, unbuffered")
	}
}

// servers maps the node's name and the addresses nftproxy listens on. As in kube-proxy, an empty
// healthz or metrics address means the default port on bindAddress's family's wildcard (healthz)
// or loopback (metrics), and an address without a port gets the default port.
func (t *Translation) servers(c *v1alpha1.KubeProxyConfiguration) {
	if h := strings.ToLower(strings.TrimSpace(c.HostnameOverride)); h != "" {
		t.set("hostnameOverride", "hostname-override", h)
	}
	v6 := false
	switch b := strings.TrimSpace(c.BindAddress); b {
	case "":
	default:
		a, err := netip.ParseAddr(b)
		switch {
		case err != nil:
			t.refuse("bindAddress", "%q is not an IP address", b)
		case a.IsUnspecified():
			v6 = a.Is6()
		case slices.Contains(trimmed(c.NodePortAddresses), npaPrimary):
			t.refuse("bindAddress", "%s with nodePortAddresses primary: kube-proxy would serve node ports on %s, nftproxy takes the primary address from the Node object; list it in nodePortAddresses instead (%s)",
				b, b, netip.PrefixFrom(a, a.BitLen()))
		default:
			v6 = a.Is6()
			t.warn("bindAddress", "not used as the node's IP (%s): nftproxy takes the node's addresses from its Node object and the kernel; it only chooses the family of the default healthz and metrics addresses", b)
		}
	}
	healthz, metrics := "0.0.0.0", "127.0.0.1"
	if v6 {
		healthz, metrics = "::", "::1"
	}
	t.set("healthzBindAddress", "healthz-bind-address", withPort(c.HealthzBindAddress, healthz, healthzPort))
	t.set("metricsBindAddress", "metrics-bind-address", withPort(c.MetricsBindAddress, metrics, metricsPort))
	t.set("bindAddressHardFail", "bind-address-hard-fail", strconv.FormatBool(c.BindAddressHardFail))
	if c.EnableProfiling {
		t.set("enableProfiling", "profiling", "true")
	}
	if c.ShowHiddenMetricsForVersion != "" {
		t.warn("showHiddenMetricsForVersion", "ignored: nftproxy hides no metrics")
	}
}

// withPort is kube-proxy's reading of a bind address: empty means host:port, an IP alone
// gets port.
func withPort(addr, host, port string) string {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return net.JoinHostPort(host, port)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		if a, err := netip.ParseAddr(strings.Trim(addr, "[]")); err == nil {
			return net.JoinHostPort(a.String(), port)
		}
	}
	return addr
}

// section is what the mode reads from its section of the file.
type section struct {
	name          string // field path of the masquerade settings
	periods       string // field path of the sync periods
	masqueradeBit *int32
	masqueradeAll bool
	syncPeriod    metav1.Duration
	minSyncPeriod metav1.Duration
}

func (t *Translation) mode(c *v1alpha1.KubeProxyConfiguration) {
	ipt, ipvs, nft := c.IPTables, c.IPVS, c.NFTables
	var s section
	switch c.Mode {
	case "nftables":
		s = section{"nftables", "nftables", nft.MasqueradeBit, nft.MasqueradeAll, nft.SyncPeriod, nft.MinSyncPeriod}
		t.otherIPTables(ipt, "nftables", false)
		t.otherIPVS(ipvs, "nftables")
	case "", "iptables":
		s = section{"iptables", "iptables", ipt.MasqueradeBit, ipt.MasqueradeAll, ipt.SyncPeriod, ipt.MinSyncPeriod}
		t.warn("mode", "%q (kube-proxy: iptables): nftproxy programs nftables; as kube-proxy in iptables mode, it reads masqueradeBit, masqueradeAll and the sync periods from the iptables section", c.Mode)
		switch lnp := ipt.LocalhostNodePorts; {
		case lnp == nil:
			t.warn("iptables.localhostNodePorts", "unset (kube-proxy's iptables mode: true): nftproxy, as kube-proxy's nftables mode, never serves node ports on 127.0.0.1; clients on the node reach node ports on the node's own addresses")
		case *lnp:
			t.refuse("iptables.localhostNodePorts", "true asks for node ports on 127.0.0.1, which nftproxy never serves (it would need route_localnet, which exposes the node's loopback services to its neighbours); set false or remove the field")
		}
		t.otherNFTables(nft, c.Mode)
		t.otherIPVS(ipvs, c.Mode)
	case "ipvs":
		s = section{"iptables", "ipvs", ipt.MasqueradeBit, ipt.MasqueradeAll, ipvs.SyncPeriod, ipvs.MinSyncPeriod}
		t.warn("mode", `"ipvs": nftproxy programs nftables; Service addresses are not put on a kube-ipvs0 interface, so they answer only on their Service ports (as in kube-proxy's iptables and nftables modes)`)
		t.ipvs(ipvs)
		t.otherIPTables(ipt, "ipvs", true)
		t.otherNFTables(nft, c.Mode)
	case "kernelspace":
		t.refuse("mode", `"kernelspace" is kube-proxy's Windows mode; nftproxy runs on Linux nodes only`)
		return
	default:
		t.refuse("mode", "%q is not a kube-proxy mode (iptables, ipvs, nftables)", c.Mode)
		return
	}
	if s.masqueradeBit != nil {
		t.set(s.name+".masqueradeBit", "masquerade-bit", strconv.Itoa(int(*s.masqueradeBit)))
	}
	t.set(s.name+".masqueradeAll", "masquerade-all", strconv.FormatBool(s.masqueradeAll))
	switch d := s.minSyncPeriod.Duration; {
	case d < 0:
		t.refuse(s.periods+".minSyncPeriod", "%v is negative", d)
	case d > 0:
		t.set(s.periods+".minSyncPeriod", "min-sync-period", d.String())
	}
	switch d := s.syncPeriod.Duration; {
	case d < 0:
		t.refuse(s.periods+".syncPeriod", "%v is negative", d)
	case d > 0:
		t.set(s.periods+".syncPeriod", "full-sync-period", d.String())
	}
}

// ipvs checks the ipvs section in ipvs mode: what IPVS itself does has no nftables equivalent.
func (t *Translation) ipvs(s v1alpha1.KubeProxyIPVSConfiguration) {
	switch s.Scheduler {
	case "", "rr":
		t.warn("ipvs.scheduler", "%q: nftproxy picks endpoints at random, which spreads connections as evenly as round robin over time", s.Scheduler)
	default:
		t.refuse("ipvs.scheduler", "%q cannot be honoured: nftproxy picks endpoints at random (round robin's spread); use sessionAffinity for stickiness, or remove the field", s.Scheduler)
	}
	if len(s.ExcludeCIDRs) > 0 {
		t.warn("ipvs.excludeCIDRs", "ignored: nftproxy never touches IPVS")
	}
	if s.StrictARP {
		t.warn("ipvs.strictARP", "ignored: without kube-ipvs0 the node does not hold Service addresses, so there is no ARP to make strict")
	}
	for _, d := range []struct {
		f string
		v time.Duration
	}{{"ipvs.tcpTimeout", s.TCPTimeout.Duration}, {"ipvs.tcpFinTimeout", s.TCPFinTimeout.Duration}, {"ipvs.udpTimeout", s.UDPTimeout.Duration}} {
		if d.v != 0 {
			t.warn(d.f, "ignored: IPVS's own timeout; with nftables the conntrack section's timeouts apply")
		}
	}
}

func (t *Translation) otherIPTables(s v1alpha1.KubeProxyIPTablesConfiguration, mode v1alpha1.ProxyMode, masqUsed bool) {
	why := fmt.Sprintf("ignored: mode is %q", mode)
	if !masqUsed {
		if s.MasqueradeBit != nil {
			t.warn("iptables.masqueradeBit", "%s, which reads nftables.masqueradeBit", why)
		}
		if s.MasqueradeAll {
			t.warn("iptables.masqueradeAll", "%s, which reads nftables.masqueradeAll", why)
		}
	}
	if s.LocalhostNodePorts != nil {
		t.warn("iptables.localhostNodePorts", "%s; node ports are never served on 127.0.0.1", why)
	}
	if s.SyncPeriod.Duration != 0 || s.MinSyncPeriod.Duration != 0 {
		t.warn("iptables.syncPeriod", "%s (iptables.syncPeriod, iptables.minSyncPeriod)", why)
	}
}

func (t *Translation) otherNFTables(s v1alpha1.KubeProxyNFTablesConfiguration, mode v1alpha1.ProxyMode) {
	if s.MasqueradeBit != nil || s.MasqueradeAll || s.SyncPeriod.Duration != 0 || s.MinSyncPeriod.Duration != 0 {
		t.warn("nftables", "ignored: mode is %q, whose section is read instead (set mode: nftables to use this one)", mode)
	}
}

func (t *Translation) otherIPVS(s v1alpha1.KubeProxyIPVSConfiguration, mode v1alpha1.ProxyMode) {
	if s.Scheduler != "" || len(s.ExcludeCIDRs) > 0 || s.StrictARP || s.SyncPeriod.Duration != 0 || s.MinSyncPeriod.Duration != 0 ||
		s.TCPTimeout.Duration != 0 || s.TCPFinTimeout.Duration != 0 || s.UDPTimeout.Duration != 0 {
		t.warn("ipvs", "ignored: mode is %q", mode)
	}
}

// local maps which traffic counts as the cluster's own (not masqueraded to ClusterIPs,
// short-circuited to LoadBalancer IPs) and where node ports are served.
func (t *Translation) local(c *v1alpha1.KubeProxyConfiguration) {
	switch c.DetectLocalMode {
	case "", "ClusterCIDR":
		t.set("detectLocalMode", "detect-local-mode", "ClusterCIDR")
	case "NodeCIDR":
		t.set("detectLocalMode", "detect-local-mode", "NodeCIDR")
	case "BridgeInterface", "InterfaceNamePrefix":
		t.refuse("detectLocalMode", "%q cannot be honoured: nftproxy tells the cluster's traffic by source address (ClusterCIDR: clusterCIDR; NodeCIDR: the Node's spec.podCIDRs)", c.DetectLocalMode)
	default:
		t.refuse("detectLocalMode", "%q is not a kube-proxy mode (ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix)", c.DetectLocalMode)
	}
	if c.DetectLocal.BridgeInterface != "" || c.DetectLocal.InterfaceNamePrefix != "" {
		if c.DetectLocalMode == "BridgeInterface" || c.DetectLocalMode == "InterfaceNamePrefix" {
			// Refused above with the mode.
		} else {
			t.warn("detectLocal", "ignored: only detectLocalMode BridgeInterface and InterfaceNamePrefix read it")
		}
	}
	if cidr := strings.TrimSpace(c.ClusterCIDR); cidr != "" {
		t.set("clusterCIDR", "cluster-cidr", cidr)
	}
	t.nodePorts(c)
}

// The keywords of nodePortAddresses: primary since kube-proxy v1.29 (alone until v1.37),
// localhost and all since v1.37, in any combination with CIDRs.
const (
	npaPrimary   = "primary"
	npaLocalhost = "localhost"
	npaAll       = "all"
	// localhostGate lets kube-proxy's nftables mode serve TCP node ports on loopback (v1.37
	// alpha) when nodePortAddresses lists a loopback range.
	localhostGate = "KubeProxyNFTablesLocalhostNodePorts"
)

// nodePorts maps nodePortAddresses to --nodeport-addresses: CIDRs and primary as they are, all
// as the flag's empty value (every node address), localhost dropped where kube-proxy does not
// serve node ports on loopback either and refused where it would.
func (t *Translation) nodePorts(c *v1alpha1.KubeProxyConfiguration) {
	list := trimmed(c.NodePortAddresses)
	if len(list) == 0 {
		return
	}
	seen := map[string]bool{}
	var keep []string
	for _, a := range list {
		switch a {
		case npaPrimary, npaLocalhost, npaAll:
			if seen[a] {
				t.refuse("nodePortAddresses", "%s is listed twice (kube-proxy refuses that too): list it once", a)
				return
			}
			seen[a] = true
			if a == npaPrimary {
				keep = append(keep, a)
			}
		default:
			keep = append(keep, a)
		}
	}
	if seen[npaLocalhost] {
		switch mode := c.Mode; {
		case mode == "nftables" && c.FeatureGates[localhostGate]:
			t.refuse("nodePortAddresses", "localhost with featureGates.%s asks for TCP node ports on 127.0.0.1 and ::1, which nftproxy never serves (a reachable loopback listener is the node's own); remove localhost from the list", localhostGate)
			return
		case (mode == "" || mode == "iptables") && (c.IPTables.LocalhostNodePorts == nil || *c.IPTables.LocalhostNodePorts):
			t.refuse("nodePortAddresses", "localhost in iptables mode asks for node ports on 127.0.0.1 (iptables.localhostNodePorts is unset or true), which nftproxy never serves (it would need route_localnet); remove localhost from the list")
			return
		case len(keep) == 0 && !seen[npaAll]:
			t.refuse("nodePortAddresses", "[localhost] alone: kube-proxy (mode %q) would serve node ports on no address, as it does not serve them on loopback; nftproxy cannot serve them nowhere: list the node addresses' CIDRs or primary instead", mode)
			return
		default:
			t.warn("nodePortAddresses", "localhost dropped: node ports are never served on loopback addresses (as in kube-proxy's mode %q); the rest of the list applies", mode)
		}
	}
	if seen[npaAll] {
		// all is 0.0.0.0/0 and ::/0, which makes kube-proxy ignore the rest of the list.
		t.set("nodePortAddresses", "nodeport-addresses", "")
		return
	}
	t.set("nodePortAddresses", "nodeport-addresses", strings.Join(keep, ","))
}

// trimmed is l with each entry's surrounding spaces removed.
func trimmed(l []string) []string {
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = strings.TrimSpace(s)
	}
	return out
}

func (t *Translation) other(c *v1alpha1.KubeProxyConfiguration) {
	if c.OOMScoreAdj != nil {
		t.warn("oomScoreAdj", "ignored (%d): nftproxy keeps only CAP_NET_ADMIN and cannot lower its OOM score; the DaemonSet's priority class system-node-critical has the kubelet give it -997", *c.OOMScoreAdj)
	}
	if c.ConfigSyncPeriod.Duration != 0 {
		t.warn("configSyncPeriod", "ignored: nftproxy's informers do not resync (a resync replays the cache and changes nothing); drift is repaired from nftables events and --full-sync-period")
	}
	if c.PortRange != "" {
		t.warn("portRange", "ignored: unused since kube-proxy's userspace mode was removed")
	}
	if c.WindowsRunAsService {
		t.warn("windowsRunAsService", "ignored: Windows only")
	}
	if c.Winkernel != (v1alpha1.KubeProxyWinkernelConfiguration{}) {
		t.warn("winkernel", "ignored: Windows only")
	}
}
