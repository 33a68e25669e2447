package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/explain"
	"github.com/nftproxy/nftproxy/proxy/nodeaddr"
)

const explainUsage = `Usage: nftproxy explain [flags] NAMESPACE/NAME
       nftproxy explain [flags] [--from SRC] DST:PORT/PROTO
       nftproxy explain --manifests DIR --node-name NAME [render's flags] NAMESPACE/NAME | DST:PORT/PROTO

Reads nftproxy's tables from this node's kernel (not what the daemon means to program) and
says, for a Service's every frontend or for one destination: which Service port, which chains,
which endpoints with what share of new connections, masqueraded or not, and every drop or
reject on the way with the rule that decided it. A Service the daemon did not program is named
with its reason, read from the daemon's rejections (--rejections-url). Run it where the daemon
runs (kubectl exec into the nftproxy pod); it needs CAP_NET_ADMIN to read the tables.

With --manifests it explains instead the tables render prints for those manifests (what run
would apply; the flags are render's), without a kernel: the node's addresses are its Node
manifest's, the rejections render's.

Flags:
`

// explainOptions are the flags of explain: its own, and render's (used with --manifests).
type explainOptions struct {
	from, rejectionsURL string
	render              Options
}

func explainCmd(args []string, stdout, stderr io.Writer) error {
	var o explainOptions
	fs := flag.NewFlagSet("nftproxy explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.render.register(fs, renderFlags)
	fs.StringVar(&o.from, "from", "", "source address of the packet; one of the node's own addresses means the node itself; default: a client outside the cluster (203.0.113.1 or 2001:db8::1)")
	fs.StringVar(&o.rejectionsURL, "rejections-url", defaultRejectionsURL(os.Getenv("METRICS_BIND_ADDRESS")), "where the daemon serves the Services it did not program (its --metrics-bind-address; in deploy/'s pods, the METRICS_BIND_ADDRESS the daemon is given); empty: do not ask")
	fs.Usage = func() {
		fmt.Fprint(stderr, explainUsage)
		fs.PrintDefaults()
	}
	// Flags may come before or after the one argument.
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
			return usageError{err}
		}
		if fs.NArg() == 0 {
			break
		}
		rest, args = append(rest, fs.Arg(0)), fs.Args()[1:]
	}
	if len(rest) != 1 {
		return usageError{fmt.Errorf("name one Service (NAMESPACE/NAME) or one destination (DST:PORT/PROTO); got %q", strings.Join(rest, " "))}
	}
	var src netip.Addr
	if o.from != "" {
		a, err := netip.ParseAddr(o.from)
		if err != nil {
			return usageError{fmt.Errorf("--from %q is not an IP address", o.from)}
		}
		src = a.Unmap()
	}
	target := rest[0]
	isDst := strings.Contains(target, ":")
	var dst netip.Addr
	var proto uint8
	var port uint16
	if isDst {
		var err error
		if dst, proto, port, err = explain.ParseDestination(target); err != nil {
			return usageError{err}
		}
		if src.IsValid() && src.Is4() != dst.Is4() {
			return usageError{fmt.Errorf("--from %s and %s are of different families", src, dst)}
		}
	} else if ns, name, ok := strings.Cut(target, "/"); !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return usageError{fmt.Errorf("%q is neither NAMESPACE/NAME nor DST:PORT/PROTO", target)}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var node *explain.Node
	if o.render.Manifests != "" {
		builders, err := o.render.builders()
		if err != nil {
			return usageError{err}
		}
		guard, err := o.render.guard()
		if err != nil {
			return usageError{err}
		}
		m, err := renderModel(&o.render, builders, guard, newLogger(o.render.Verbosity, stderr))
		if err != nil {
			return err
		}
		node = m.explainNode()
		fmt.Fprintf(stdout, "# the ruleset render prints for %s (node %q), not this machine's kernel\n", o.render.Manifests, o.render.NodeName)
	} else {
		var err error
		if node, err = readNode(ctx, &o); err != nil {
			return err
		}
	}
	if isDst {
		node.WriteAnswer(stdout, node.Explain(node.Packet(src, dst, proto, port)), "")
	} else {
		node.WriteService(stdout, node.Service(target, src))
	}
	return nil
}

// readNode reads what explain works on: the tables and addresses from the kernel, the
// rejections from the daemon.
func readNode(ctx context.Context, o *explainOptions) (*explain.Node, error) {
	k, err := nft.NewKernel()
	if err != nil {
		return nil, fmt.Errorf("open netlink: %w (explain reads the kernel's tables: it needs CAP_NET_ADMIN; run it in the nftproxy pod)", err)
	}
	defer k.Close()
	tables, err := explain.ReadTables(ctx, k, o.render.Table)
	if err != nil {
		return nil, err
	}
	if len(tables) == 0 {
		return nil, fmt.Errorf("the kernel holds no table named %q in ip or ip6: nftproxy has not programmed this network namespace (run explain where the daemon runs, e.g. kubectl exec into its pod, or give --manifests to explain what render prints)", o.render.Table)
	}
	addrs, err := nodeaddr.List(nil)
	if err != nil {
		return nil, fmt.Errorf("read the node's addresses: %w", err)
	}
	node := &explain.Node{Tables: tables, Addrs: addrs}
	if o.rejectionsURL == "" {
		node.RejectionsErr = errors.New("--rejections-url is empty")
	} else {
		node.Rejections, node.RejectionsErr = explain.FetchRejections(ctx, &http.Client{Timeout: 5 * time.Second}, o.rejectionsURL)
	}
	return node, nil
}

// defaultRejectionsURL is where explain asks for the daemon's rejections: on metricsAddr (the
// daemon's --metrics-bind-address, which deploy/'s DaemonSet also puts in the environment as
// METRICS_BIND_ADDRESS, so `kubectl exec ds/nftproxy -- nftproxy explain` finds it), or the
// flag's default, 127.0.0.1:10249. An unspecified host (0.0.0.0, ::) is asked on loopback.
func defaultRejectionsURL(metricsAddr string) string {
	host, port, err := net.SplitHostPort(metricsAddr)
	if metricsAddr == "" || err != nil {
		host, port = "127.0.0.1", "10249"
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + explain.RejectionsPath
}
