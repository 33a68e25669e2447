package app

import (
	"flag"
	"fmt"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// Options are the flags of `run` and `render`. Names follow kube-proxy's where the meaning is
// the same, so existing configuration carries over.
type Options struct {
	Manifests      string
	Kubeconfig     string
	Master         string
	NodeName       string
	Once           bool
	ProxyName      string
	Table          string
	Families       string
	ClusterCIDRs   prefixList
	ServiceCIDRs   prefixList
	NodePortCIDRs  prefixList
	MasqueradeAll  bool
	MasqueradeBit  int
	DropBit        int
	MinSyncPeriod  syncPeriod
	FullSyncPeriod time.Duration
	DriftEvents    bool
	HealthzAddress string
	MetricsAddress string
	// HealthCheckPort is --health-check-port: the listener the health-check node ports are
	// redirected to (0: they are not served).
	HealthCheckPort int
	Profiling       bool
	HealthzTimeout  time.Duration
	// MaxServiceCost bounds what one Service may cost the kernel (0: no bound).
	MaxServiceCost int
	Verbosity      int
	StateDir       string
	NodePortRange  string
	BlockRange     string
	// MaxManifestBytes is the per-file size limit of the manifest loader.
	MaxManifestBytes int64
	ReservedPorts    string
	// ConfigFile is --config: kube-proxy's KubeProxyConfiguration, read before the flags given
	// on the command line, which override it (config.go).
	ConfigFile string
	// NodePortPrimary is --nodeport-addresses primary: node ports on the Node's primary address
	// of each family too (only, unless CIDRs are given beside it); it is added to NodePortCIDRs
	// from the Node at start (nodeinfo.go).
	NodePortPrimary bool
	// nodePortBeside are the CIDRs given with primary in --nodeport-addresses.
	nodePortBeside prefixList
	// AffinityMapSize is --affinity-map-size: the bound of each shared ClientIP affinity map.
	AffinityMapSize uint
	// DetectLocalMode is ClusterCIDR (--cluster-cidr is the cluster's traffic) or NodeCIDR (the
	// Node's spec.podCIDRs, read at start, are).
	DetectLocalMode string
	// BindAddressHardFail makes a healthz or metrics port that cannot be bound fatal; otherwise
	// it is retried and reported (listen.go).
	BindAddressHardFail bool
	// config is what --config did, logged once the logger exists.
	config *configReport
}

// syncPeriod is --min-sync-period: "auto" (the zero value) or a duration. A duration keeps
// kube-proxy's meaning, so a configuration that sets it gets what it asked for; auto is
// nftproxy's own default, because its syncs cost milliseconds where kube-proxy's cost seconds.
type syncPeriod struct {
	d     time.Duration
	fixed bool
}

func (s *syncPeriod) String() string {
	if s == nil || !s.fixed {
		return "auto"
	}
	return s.d.String()
}

func (s *syncPeriod) Set(v string) error {
	if strings.TrimSpace(v) == "auto" {
		*s = syncPeriod{}
		return nil
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d < 0 {
		return fmt.Errorf("%q is neither auto nor a duration ≥ 0 (like 1s or 500ms)", v)
	}
	*s = syncPeriod{d: d, fixed: true}
	return nil
}

// prefixList is a comma-separated list of CIDRs.
type prefixList []netip.Prefix

func (p *prefixList) String() string {
	var s []string
	for _, x := range *p {
		s = append(s, x.String())
	}
	return strings.Join(s, ",")
}

func (p *prefixList) Set(v string) error {
	*p = nil
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		pr, err := netip.ParsePrefix(f)
		if err != nil {
			return fmt.Errorf("%q is not a CIDR (like 198.18.0.0/15 or fd00::/64)", f)
		}
		*p = append(*p, pr.Masked())
	}
	return nil
}

// The values of --detect-local-mode.
const (
	detectClusterCIDR = "ClusterCIDR"
	detectNodeCIDR    = "NodeCIDR"
)

// nodePortAddresses is --nodeport-addresses: CIDRs and the word primary, in any combination
// (kube-proxy's since v1.37; before, primary had to be alone).
type nodePortAddresses struct{ o *Options }

func (n nodePortAddresses) String() string {
	if n.o == nil {
		return ""
	}
	if n.o.NodePortPrimary {
		if len(n.o.nodePortBeside) == 0 {
			return "primary"
		}
		return "primary," + n.o.nodePortBeside.String()
	}
	return n.o.NodePortCIDRs.String()
}

func (n nodePortAddresses) Set(v string) error {
	n.o.NodePortPrimary = false
	var cidrs []string
	for _, f := range strings.Split(v, ",") {
		switch f = strings.TrimSpace(f); f {
		case "primary":
			if n.o.NodePortPrimary {
				return fmt.Errorf("%q: primary is given twice", v)
			}
			n.o.NodePortPrimary = true
		case "all", "localhost":
			return fmt.Errorf("%q: %s is not a word of this flag (only primary): %s", v, f, map[string]string{
				"all":       "leave the flag empty to serve node ports on every node address",
				"localhost": "nftproxy never serves node ports on loopback addresses",
			}[f])
		default:
			cidrs = append(cidrs, f)
		}
	}
	var given prefixList
	if err := given.Set(strings.Join(cidrs, ",")); err != nil {
		return err
	}
	n.o.NodePortCIDRs, n.o.nodePortBeside = given, nil
	if n.o.NodePortPrimary {
		// NodePortCIDRs is set from the Node at start (nodeinfo.go).
		n.o.NodePortCIDRs, n.o.nodePortBeside = nil, given
	}
	return nil
}

// flagScope says which command's flags to register: each command offers only the flags it
// reads, so its -h lists no flag it would ignore.
type flagScope int

const (
	cleanupFlags flagScope = iota // --table and -v: which tables to delete, and the log
	renderFlags                   // everything that changes the ruleset as well (run's ruleset is render's)
	runFlags                      // the daemon's (sources, syncs, servers) as well
)

func (o *Options) register(fs *flag.FlagSet, scope flagScope) {
	fs.StringVar(&o.Table, "table", ruleset.DefaultTable, "name of nftproxy's table in each family")
	fs.IntVar(&o.Verbosity, "v", 0, "log verbosity (0: changes and problems; 2: every sync; 4: debugging)")
	if scope < renderFlags {
		return
	}
	fs.StringVar(&o.Manifests, "manifests", "", "directory of Service, EndpointSlice and Node manifests (YAML or JSON, multi-document) to serve; watched for changes")
	fs.StringVar(&o.NodeName, "node-name", "", "name of this node: its Node object gives the node-port addresses and the zone, and selects local endpoints")
	fs.StringVar(&o.NodeName, "hostname-override", "", "same as --node-name (kube-proxy's name); required in Kubernetes mode, where the DaemonSet passes spec.nodeName")
	fs.StringVar(&o.ProxyName, "service-proxy-name", "", "handle only Services labelled service.kubernetes.io/service-proxy-name=<this>; empty: only Services without that label")
	fs.StringVar(&o.Families, "ip-families", "ipv4,ipv6", "IP families to program: ipv4, ipv6 or both")
	fs.Var(&o.ClusterCIDRs, "cluster-cidr", "pod CIDRs (comma-separated); traffic to a ClusterIP from outside them is masqueraded")
	fs.Var(&o.ServiceCIDRs, "service-cidr", "Service CIDRs (comma-separated); traffic to addresses in them that no Service owns is dropped, so one holding an address of the node (the kernel's or the Node object's) is refused before anything is programmed; manifest mode: a Service whose cluster IP is not allocatable from them is rejected")
	fs.Var(nodePortAddresses{o}, "nodeport-addresses", "node ports are served only on node addresses inside these CIDRs (comma-separated), and, with the word primary, on the Node object's primary address of each family (its first InternalIP, else ExternalIP); empty: every node address except loopback")
	fs.StringVar(&o.DetectLocalMode, "detect-local-mode", detectClusterCIDR, "which traffic is the cluster's own (not masqueraded to ClusterIPs, short-circuited to LoadBalancer IPs of externalTrafficPolicy=Local Services): ClusterCIDR (from --cluster-cidr) or NodeCIDR (from this Node's spec.podCIDRs, read at start)")
	fs.StringVar(&o.ConfigFile, "config", "", "kube-proxy's configuration file (KubeProxyConfiguration, kubeproxy.config.k8s.io/v1alpha1; kubeadm's kube-proxy ConfigMap as it is): read strictly, every field mapped to a flag, warned about or refused with its reason; flags given on the command line override it")
	fs.BoolVar(&o.MasqueradeAll, "masquerade-all", false, "masquerade all traffic to Services, not only traffic from outside the cluster")
	fs.UintVar(&o.AffinityMapSize, "affinity-map-size", ruleset.DefaultAffinityMapSize, "most client . Service address entries each shared sessionAffinity ClientIP map (IPv4) holds; when full, new clients are still spread over the endpoints but not remembered (about 100-130 bytes of kernel memory per entry)")
	fs.IntVar(&o.MasqueradeBit, "masquerade-bit", 14, "bit of the packet mark (0-31) that marks traffic to masquerade; must differ from --drop-bit")
	fs.IntVar(&o.DropBit, "drop-bit", 15, "bit of the packet mark (0-31) that marks traffic to drop; must differ from --masquerade-bit")
	fs.StringVar(&o.NodePortRange, "service-node-port-range", policy.DefaultNodePortRange, "manifest mode: node ports are assigned from this range, as the API server's --service-node-port-range")
	fs.StringVar(&o.BlockRange, "range-node-port-range", policy.DefaultBlockRange, "node-port blocks of port-range Services (identity-mapped: the Service's own ports) must lie in this range: manifest mode assigns them from it, and in both modes a block outside it is rejected on this node (give the allocator the same value); empty disables blocks")
	fs.Int64Var(&o.MaxManifestBytes, "manifest-max-file-size", manifest.DefaultMaxFileBytes, "manifest mode: largest manifest file read, in bytes; a larger file is refused (logged) and its objects keep their last good state (the default fits 10,000 Services with their EndpointSlices in one file)")
	fs.StringVar(&o.ReservedPorts, "reserved-ports", model.DefaultReservedPorts, "ports and ranges of the node (comma-separated, every protocol) that no Service may capture or reject on a node address: not with a LoadBalancer or external IP that is a node address, a node port, a health-check node port or a node-port block; the ports of --healthz-bind-address and --metrics-bind-address are added. Default: SSH, etcd, the API server, the kubelet and the control-plane components")
	fs.IntVar(&o.MaxServiceCost, "max-service-cost", proxier.DefaultMaxServiceCost, "most kernel objects one Service's rules may take (chains, rules and map elements; a named set counts 100; about 2 per endpoint and port): a costlier Service is rejected (reason CostLimit) so its commit cannot hold up every other Service's changes; 0: no bound")
	// The servers' addresses change the ruleset too: their ports join --reserved-ports (guard),
	// so render and explain --manifests take them to print what run programs.
	fs.StringVar(&o.HealthzAddress, "healthz-bind-address", "0.0.0.0:10256", "address of /healthz and /livez (run serves them; empty disables them); its port is reserved like --reserved-ports, so render takes it too")
	fs.IntVar(&o.HealthCheckPort, "health-check-port", DefaultHealthCheckPort, "TCP port of the one listener (on every address) that answers the health-check node ports of externalTrafficPolicy=Local Services: nftproxy never binds those ports, its rules redirect them here while no other process (kube-proxy, during a handover) holds them; reserved like --reserved-ports; two nftproxy daemons on one node (--table, --service-proxy-name) need two ports; 0: the health-check node ports are not served")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", "127.0.0.1:10249", "address of /metrics and /rejections, the Services not programmed, which nftproxy explain reads (run serves them; empty disables them); its port is reserved like --reserved-ports, so render takes it too")
	if scope == renderFlags {
		fs.StringVar(&o.StateDir, "state-dir", "", "manifest mode: the state directory of the run whose ruleset to print: its node-port assignments are read (never written), so the node ports printed are those run applies; empty: assigned afresh, the same on every render")
		return
	}
	fs.StringVar(&o.StateDir, "state-dir", "", "manifest mode: directory where assigned node ports and the last good copy of each manifest file are kept, so they survive restarts (e.g. /var/lib/nftproxy): a file that cannot be read or decoded at start serves the objects of its copy; empty keeps both in memory only")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file of the API server to watch (Kubernetes mode); in a pod without it, the in-cluster ServiceAccount is used unless --manifests is given")
	fs.StringVar(&o.Master, "master", "", "API server address (https://HOST:PORT); overrides the kubeconfig's server, or in a pod the in-cluster address (needed where no service proxy serves the kubernetes Service yet)")
	fs.BoolVar(&o.Once, "once", false, "apply one full sync and exit: 0 on success, 1 on failure")
	fs.Var(&o.MinSyncPeriod, "min-sync-period", "auto (the default): the wait between syncs adapts to what they cost (a change after a quiet spell is synced at once, bursts are coalesced, syncs take at most 20% of a core) and never exceeds 1s; a duration: kube-proxy's meaning, exactly that least time between two syncs (0: every change at once)")
	fs.DurationVar(&o.FullSyncPeriod, "full-sync-period", time.Hour, "how often to read the kernel back and repair drift (someone flushing or editing our tables)")
	fs.BoolVar(&o.DriftEvents, "drift-events", true, "watch nftables events and repair another process's changes to our tables (nft flush ruleset, a deleted element) at once, not only at the next --full-sync-period; changes to other tables are ignored")
	fs.BoolVar(&o.Profiling, "profiling", false, "serve Go's profiles (net/http/pprof) under /debug/pprof/ on the metrics address, as kube-proxy's --profiling; off by default, since profiles show the process's internals to whoever reaches that address")
	fs.BoolVar(&o.BindAddressHardFail, "bind-address-hard-fail", false, "exit when the healthz or metrics address cannot be bound; otherwise it is retried every 5s, logged and reported in nftproxy_listener_up while the rules are programmed as usual")
	fs.DurationVar(&o.HealthzTimeout, "healthz-timeout", time.Minute, "/healthz and the health-check node ports fail when a change has waited this long while the sync loop made no progress (committed or started no transaction), or syncs have failed this long (an unreachable API server never fails them)")
}

// families parses --ip-families.
func (o *Options) families() ([]nft.Family, error) {
	var out []nft.Family
	for _, f := range strings.Split(o.Families, ",") {
		switch strings.ToLower(strings.TrimSpace(f)) {
		case "ipv4":
			out = append(out, nft.IPv4)
		case "ipv6":
			out = append(out, nft.IPv6)
		case "":
		default:
			return nil, fmt.Errorf("--ip-families: %q is not ipv4 or ipv6", f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--ip-families: name at least one of ipv4, ipv6")
	}
	return out, nil
}

// builders validates the options and returns one builder per family.
func (o *Options) builders() ([]*ruleset.Builder, error) {
	fams, err := o.families()
	if err != nil {
		return nil, err
	}
	if err := checkTableName(o.Table); err != nil {
		return nil, err
	}
	masq, err := ruleset.BitMask(o.MasqueradeBit)
	if err != nil {
		return nil, fmt.Errorf("--masquerade-bit: %w", err)
	}
	drop, err := ruleset.BitMask(o.DropBit)
	if err != nil {
		return nil, fmt.Errorf("--drop-bit: %w", err)
	}
	if o.AffinityMapSize < 1 || o.AffinityMapSize > math.MaxUint32 {
		return nil, fmt.Errorf("--affinity-map-size %d: use 1 to %d entries", o.AffinityMapSize, uint64(math.MaxUint32))
	}
	if o.DetectLocalMode != detectClusterCIDR && o.DetectLocalMode != detectNodeCIDR {
		return nil, fmt.Errorf("--detect-local-mode %q: use ClusterCIDR or NodeCIDR (nftproxy tells the cluster's traffic by its source address)", o.DetectLocalMode)
	}
	if masq == drop {
		return nil, fmt.Errorf("--masquerade-bit and --drop-bit are both %d: choose two different bits", o.DropBit)
	}
	if err := o.checkHealthCheckPort(); err != nil {
		return nil, err
	}
	if o.MaxServiceCost < 0 { // bounds what is built for each Service (run and render)
		return nil, fmt.Errorf("--max-service-cost %d: must be 0 (no bound) or more", o.MaxServiceCost)
	}
	var out []*ruleset.Builder
	for _, f := range fams {
		b, err := ruleset.NewBuilder(ruleset.Config{Family: f, Table: o.Table, MasqueradeMark: masq, DropMark: drop,
			MasqueradeAll: o.MasqueradeAll, ClusterCIDRs: o.ClusterCIDRs, ServiceCIDRs: o.ServiceCIDRs,
			NodePortCIDRs: o.NodePortCIDRs, NodeName: o.NodeName, AffinityMapSize: uint32(o.AffinityMapSize),
			HealthCheckPort: uint16(o.HealthCheckPort)})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// DefaultHealthCheckPort is --health-check-port's default: inside the default --reserved-ports
// range 10248-10259 (no Service may capture it on a node address) and used by none of the
// components that range is kept for (the kubelet's 10248, 10250 and 10255, kube-proxy's or
// nftproxy's 10249 and 10256, the allocator's 10251 and 10252, the controller-manager's 10257,
// the cloud controller-manager's 10258, the scheduler's 10259); 10254 is ingress-nginx's.
const DefaultHealthCheckPort = 10253

// checkHealthCheckPort refuses a --health-check-port out of range or shared with the healthz or
// metrics address.
func (o *Options) checkHealthCheckPort() error {
	if o.HealthCheckPort < 0 || o.HealthCheckPort > math.MaxUint16 {
		return fmt.Errorf("--health-check-port %d: use a TCP port from 1 to 65535, or 0 to leave the health-check node ports unserved", o.HealthCheckPort)
	}
	for _, a := range []struct{ flag, addr string }{{"--healthz-bind-address", o.HealthzAddress}, {"--metrics-bind-address", o.MetricsAddress}} {
		if _, port, err := net.SplitHostPort(a.addr); err == nil && o.HealthCheckPort != 0 && port == strconv.Itoa(o.HealthCheckPort) {
			return fmt.Errorf("--health-check-port %d is also the port of %s %s: give each its own port", o.HealthCheckPort, a.flag, a.addr)
		}
	}
	return nil
}

// guard returns the node-address guard's settings: --reserved-ports plus the ports nftproxy itself
// listens on, --range-node-port-range, and in manifest mode --service-cidr (where cluster IPs
// must lie; in Kubernetes mode the API server allocated them, maybe from ServiceCIDRs the flag
// does not list, see model.GuardConfig).
func (o *Options) guard() (model.GuardConfig, error) {
	var g model.GuardConfig
	if o.Manifests != "" {
		g.ServiceCIDRs = o.ServiceCIDRs
	}
	reserved, err := model.ParsePortSpans(o.ReservedPorts)
	if err != nil {
		return g, fmt.Errorf("--reserved-ports: %w", err)
	}
	for _, a := range []struct{ flag, addr string }{{"--healthz-bind-address", o.HealthzAddress}, {"--metrics-bind-address", o.MetricsAddress}} {
		if a.addr == "" {
			continue
		}
		_, port, err := net.SplitHostPort(a.addr)
		if err != nil {
			return g, fmt.Errorf("%s %q: %w (write HOST:PORT, e.g. 0.0.0.0:10256)", a.flag, a.addr, err)
		}
		if n, err := strconv.ParseUint(port, 10, 16); err == nil && n > 0 {
			reserved = append(reserved, model.PortSpan{First: uint16(n), Last: uint16(n)})
		}
	}
	if o.HealthCheckPort > 0 && o.HealthCheckPort <= math.MaxUint16 {
		reserved = append(reserved, model.PortSpan{First: uint16(o.HealthCheckPort), Last: uint16(o.HealthCheckPort)})
	}
	g.ReservedPorts = reserved
	if o.BlockRange != "" {
		r, err := allocator.ParseRange(o.BlockRange)
		if err != nil {
			return g, fmt.Errorf("--range-node-port-range: %w", err)
		}
		g.BlockRange = model.PortSpan{First: uint16(r.First), Last: uint16(r.Last)}
	}
	return g, nil
}

func (o *Options) runConfig() proxier.RunConfig {
	return proxier.RunConfig{MinSyncPeriod: o.MinSyncPeriod.d, FixedSyncPeriod: o.MinSyncPeriod.fixed, FullSyncPeriod: o.FullSyncPeriod}
}

// loader is the manifest loader the flags describe.
func (o *Options) loader() manifest.Loader {
	return manifest.Loader{MaxFileBytes: o.MaxManifestBytes}
}
