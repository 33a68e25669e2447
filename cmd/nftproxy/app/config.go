package app

import (
	"flag"
	"fmt"
	"sort"
	"strings"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/cmd/nftproxy/app/kpconfig"
)

// configReport is what --config did to the flags, logged at start: which file field set which
// flag, which fields were overridden by the command line, what is ignored and why, and the
// effective value and source of every flag.
type configReport struct {
	file       string
	warnings   []kpconfig.Note
	overridden []kpconfig.Setting // the command line gave the flag: the file's value is not used
	missing    []kpconfig.Setting // this build has no such flag (e.g. --profiling)
	conntrack  kpconfig.Conntrack
	effective  []string // "flag=value (source)", sorted by flag
}

// aliases are flags writing one setting: giving either on the command line keeps the file's
// value of the other from overriding it.
var aliases = map[string]string{"node-name": "hostname-override", "hostname-override": "node-name"}

// applyConfigFile reads --config and sets every flag it maps that the command line did not give
// (kube-proxy lets a few flags override its file and ignores the others; nftproxy lets every flag
// given override it, and says so in the log). A refused field fails the command.
func (o *Options) applyConfigFile(fs *flag.FlagSet, scope flagScope) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	r := &configReport{}
	o.config = r
	source := map[string]string{}
	if o.ConfigFile != "" {
		cfg, err := kpconfig.Load(o.ConfigFile)
		if err != nil {
			return err
		}
		tr := kpconfig.Translate(cfg)
		if err := tr.Err(); err != nil {
			return fmt.Errorf("--config %s: %w", o.ConfigFile, err)
		}
		r.file, r.warnings, r.conntrack = o.ConfigFile, tr.Warnings, tr.Conntrack
		for _, s := range tr.Settings {
			switch {
			case fs.Lookup(s.Flag) == nil:
				if scope == runFlags {
					r.missing = append(r.missing, s)
				}
			case given[s.Flag] || given[aliases[s.Flag]]:
				r.overridden = append(r.overridden, s)
			default:
				if err := fs.Set(s.Flag, s.Value); err != nil {
					return fmt.Errorf("--config %s: %s: %w", o.ConfigFile, s.Field, err)
				}
				source[s.Flag] = "config " + s.Field
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		src := "default"
		switch {
		case given[f.Name] || given[aliases[f.Name]]:
			src = "command line"
		case source[f.Name] != "":
			src = source[f.Name]
		case source[aliases[f.Name]] != "":
			src = source[aliases[f.Name]]
		}
		r.effective = append(r.effective, fmt.Sprintf("--%s=%s (%s)", f.Name, f.Value.String(), src))
	})
	sort.Strings(r.effective)
	return nil
}

// logConfig logs what --config did and the effective configuration, and warns loudly about a
// configuration that leaves the cluster's traffic undetected.
func (o *Options) logConfig(log logr.Logger) {
	r := o.config
	if r == nil {
		return
	}
	if r.file != "" {
		for _, n := range r.warnings {
			log.Info("WARNING: kube-proxy configuration field: nftproxy differs from kube-proxy here", "file", r.file, "field", n.Field, "why", n.Why)
		}
		for _, s := range r.overridden {
			log.Info("kube-proxy configuration field overridden by the command line", "field", s.Field, "file", s.Value, "flag", "--"+s.Flag)
		}
		for _, s := range r.missing {
			log.Info("WARNING: kube-proxy configuration field not applied: this build has no such flag", "field", s.Field, "value", s.Value, "flag", "--"+s.Flag)
		}
		c := r.conntrack
		log.Info("conntrack settings are applied by `nftproxy init` (a privileged initContainer), not by the daemon",
			"maxPerCore", c.MaxPerCore, "min", c.Min, "tcpEstablishedTimeout", c.TCPEstablishedTimeout, "tcpCloseWaitTimeout", c.TCPCloseWaitTimeout,
			"tcpBeLiberal", c.TCPBeLiberal, "udpTimeout", c.UDPTimeout, "udpStreamTimeout", c.UDPStreamTimeout)
	}
	log.Info("effective configuration", "flags", strings.Join(r.effective, " "))
	if o.Manifests == "" && o.Kubeconfig == "" && o.Master == "" && inCluster() && o.ProxyName == "" {
		log.Info("WARNING: the API server is reached through the kubernetes Service's ClusterIP (in-cluster config), which needs a working service proxy. " +
			"Where nftproxy replaces kube-proxy, a new node has none and nftproxy cannot start: give the API server's address " +
			"(--master, the ConfigMap's api-server) or a kubeconfig naming it (--kubeconfig, or kubeadm's kube-proxy ConfigMap through --config)")
	}
}

// warnNoClusterTraffic says loudly what an empty cluster CIDR turns off: without it nftproxy
// cannot tell pods from the outside world.
func (o *Options) warnNoClusterTraffic(log logr.Logger) {
	if o.DetectLocalMode != detectClusterCIDR || len(o.ClusterCIDRs) > 0 {
		return
	}
	log.Info("WARNING: no cluster CIDR (--cluster-cidr, or clusterCIDR in --config): nftproxy cannot tell the cluster's traffic from the outside world. " +
		"Traffic to ClusterIPs from outside the cluster is NOT masqueraded (unless --masquerade-all), so replies from endpoints on other nodes may bypass this node and be dropped; " +
		"pods' traffic to LoadBalancer and external IPs of externalTrafficPolicy=Local Services is NOT short-circuited to the cluster's endpoints, so pods on nodes without a local endpoint are dropped. " +
		"Set --cluster-cidr to the pod CIDRs, or --detect-local-mode NodeCIDR to use this Node's spec.podCIDRs")
}
