package app

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/controller"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/proxy/localports"
)

// allocatorOptions are the flags of `nftproxy allocator`.
type allocatorOptions struct {
	Kubeconfig     string
	Master         string
	BlockRange     string
	NodePortRange  string
	LocalPortRange string
	ReservedPorts  string
	ProxyName      string
	LeaseNamespace string
	LeaseName      string
	Identity       string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration
	HealthzAddress string
	MetricsAddress string
	Verbosity      int
}

func (o *allocatorOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file of the API server; in a pod without it, the in-cluster ServiceAccount is used")
	fs.StringVar(&o.Master, "master", "", "API server address (https://HOST:PORT); overrides the kubeconfig's server, or in a pod the in-cluster address")
	fs.StringVar(&o.BlockRange, "range-node-port-range", policy.DefaultBlockRange,
		"where node-port blocks of port-range Services live (N1-N2); blocks are the Services' own ranges, so a range outside it gets none. "+
			"Must not overlap --service-node-port-range nor the node's ephemeral ports")
	fs.StringVar(&o.NodePortRange, "service-node-port-range", policy.DefaultNodePortRange,
		"the API server's --service-node-port-range; blocks never overlap it")
	fs.StringVar(&o.LocalPortRange, "ip-local-port-range", "",
		"the nodes' ephemeral ports (N1-N2), which blocks must not overlap; empty: read "+localports.RangeFile+
			" and "+localports.ReservedFile+" (the node's own values when the pod uses the host network)")
	fs.StringVar(&o.ReservedPorts, "ip-local-reserved-ports", "",
		"with --ip-local-port-range: the nodes' net.ipv4.ip_local_reserved_ports (e.g. 1000-2000,3000), exempt from the check")
	fs.StringVar(&o.ProxyName, "service-proxy-name", "", "handle only Services labelled service.kubernetes.io/service-proxy-name=<this>; empty: only Services without that label (as the proxies)")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", envOr("POD_NAMESPACE", "kube-system"), "namespace of the leader-election Lease (default: $POD_NAMESPACE, else kube-system)")
	fs.StringVar(&o.LeaseName, "lease-name", controller.DefaultLeaseName, "name of the leader-election Lease; replicas sharing it elect one leader")
	fs.StringVar(&o.Identity, "identity", "", "this replica's name in the Lease, unique among replicas (default: $POD_NAME, else the host name with a random suffix)")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", controller.DefaultLeaseDuration, "how long a waiting replica waits after the leader's last renewal before it takes over")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", controller.DefaultRenewDeadline, "how long the leader keeps acting without renewing; must be shorter than the lease duration")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", controller.DefaultRetryPeriod, "how often replicas try to acquire or renew the Lease")
	fs.StringVar(&o.HealthzAddress, "healthz-bind-address", DefaultAllocatorHealthzAddress,
		"IP:PORT serving /livez (fails only for a replica stuck leading past its Lease) and /healthz (ready once the Lease was read: "+
			"the replica knows the leader); empty: disabled")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", DefaultAllocatorMetricsAddress,
		"IP:PORT serving /metrics ("+metrics.AllocatorLeader+", the node-port allocator's numbers); equal to --healthz-bind-address: one listener; empty: disabled")
	fs.IntVar(&o.Verbosity, "v", 0, "log verbosity (0: assignments and problems; 1: releases and retries)")
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseAllocatorFlags parses and checks the command line; range problems are usage errors.
func parseAllocatorFlags(args []string, stderr io.Writer) (*allocatorOptions, error) {
	var o allocatorOptions
	fs := flag.NewFlagSet("nftproxy allocator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage of nftproxy allocator: the cluster controller that gives port-range Services of type\n"+
			"NodePort and LoadBalancer their node-port blocks (one replica leads, elected on a Lease).\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{err}
	}
	if fs.NArg() > 0 {
		return nil, usageError{fmt.Errorf("unexpected arguments %q: every setting is a flag", strings.Join(fs.Args(), " "))}
	}
	for _, a := range []struct{ flag, addr string }{{"--healthz-bind-address", o.HealthzAddress}, {"--metrics-bind-address", o.MetricsAddress}} {
		if a.addr == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return nil, usageError{fmt.Errorf("%s %q: %w (want IP:PORT, e.g. 0.0.0.0:10251; empty disables it)", a.flag, a.addr, err)}
		}
	}
	if o.ReservedPorts != "" && o.LocalPortRange == "" {
		return nil, usageError{errors.New("--ip-local-reserved-ports needs --ip-local-port-range (without it both are read from the node)")}
	}
	return &o, nil
}

// ranges parses and checks the block range against the API server's node ports and the
// node's ephemeral ports.
func (o *allocatorOptions) ranges() (allocator.Range, error) {
	blocks, err := allocator.ParseRange(o.BlockRange)
	if err != nil {
		return allocator.Range{}, usageError{fmt.Errorf("--range-node-port-range: %w", err)}
	}
	nodePorts, err := allocator.ParseRange(o.NodePortRange)
	if err != nil {
		return allocator.Range{}, usageError{fmt.Errorf("--service-node-port-range: %w", err)}
	}
	var (
		eph      allocator.Range
		reserved []allocator.Range
	)
	if o.LocalPortRange != "" {
		if eph, err = allocator.ParseRange(o.LocalPortRange); err != nil {
			return allocator.Range{}, usageError{fmt.Errorf("--ip-local-port-range: %w", err)}
		}
		if reserved, err = allocator.ParseReservedPorts(o.ReservedPorts); err != nil {
			return allocator.Range{}, usageError{fmt.Errorf("--ip-local-reserved-ports: %w", err)}
		}
	} else if eph, reserved, err = controller.ReadLocalPorts(localports.RangeFile, localports.ReservedFile); err != nil {
		return allocator.Range{}, err
	}
	if err := controller.CheckRanges(blocks, nodePorts, eph, reserved); err != nil {
		return allocator.Range{}, usageError{err}
	}
	return blocks, nil
}

// identity is --identity, else the pod name, else the host name with a random suffix (two
// replicas on one host network must not share a name).
func (o *allocatorOptions) identity() (string, error) {
	if o.Identity != "" {
		return o.Identity, nil
	}
	if p := os.Getenv("POD_NAME"); p != "" {
		return p, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no --identity and no host name: %w", err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b), nil
}

func allocatorCmd(args []string, stderr io.Writer) error {
	o, err := parseAllocatorFlags(args, stderr)
	if err != nil {
		return err
	}
	blocks, err := o.ranges()
	if err != nil {
		return err
	}
	id, err := o.identity()
	if err != nil {
		return err
	}
	log := newLogger(o.Verbosity, stderr).WithName("allocator")
	cfg, err := (&Options{Kubeconfig: o.Kubeconfig, Master: o.Master}).restConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("API client for %s: %w", cfg.Host, err)
	}
	var c *controller.Controller
	reg, am, err := allocatorRegistry(func() bool { return c != nil && c.IsLeader() })
	if err != nil {
		return err
	}
	c, err = controller.New(controller.Config{
		Client: client, BlockRange: blocks, ProxyName: o.ProxyName, Identity: id,
		LeaseNamespace: o.LeaseNamespace, LeaseName: o.LeaseName,
		LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		Observer: am, Logger: log,
	})
	if err != nil {
		return usageError{err}
	}
	_, stopServers, err := serveAllocator(log, o.HealthzAddress, o.MetricsAddress, allocatorListenRetry, c, reg)
	if err != nil {
		return err
	}
	defer stopServers()
	ctx, _, stop := handleSignals(log, "allocator")
	defer stop()
	log.Info("Starting", "version", Version, "identity", id, "blockRange", blocks.String(), "server", cfg.Host,
		"lease", o.LeaseNamespace+"/"+o.LeaseName)
	return c.Run(ctx)
}
