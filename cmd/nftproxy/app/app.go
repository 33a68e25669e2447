// Package app is the nftproxy command line: subcommands, flags, and the wiring of sources,
// model, builder, reconciler, kernel, metrics and health into a running daemon.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2/textlogger"

	"github.com/nftproxy/nftproxy/nft"
)

// Version is set at build time (-ldflags -X).
var Version = "dev"

const usage = `nftproxy: a Kubernetes service proxy that programs nftables directly over netlink.

Usage:
  nftproxy run     --manifests DIR --node-name NAME [flags]   serve Services from manifest files (--once: one sync, then exit)
  nftproxy render  --manifests DIR --node-name NAME [flags]   print the nft ruleset that run would apply; touches nothing
  nftproxy explain NAMESPACE/NAME | [--from SRC] DST:PORT/PROTO   what this node's kernel does with a Service or a packet, and why
  nftproxy cleanup [--table NAME]                             delete nftproxy's tables (ip and ip6) and nothing else
  nftproxy cleanup --kube-proxy                               delete kube-proxy's nftables tables and the iptables-nft chains it creates, nothing else
  nftproxy init    [--conntrack-* flags]                      set the conntrack sysctls (kube-proxy's --init-only; needs a privileged container)
  nftproxy allocator --kubeconfig FILE [flags]                assign node-port blocks to port-range Services (cluster controller, leader-elected)
  nftproxy version                                            print the version

Run "nftproxy <command> -h" for the flags of a command.
`

// Main runs the command line and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) < 2 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmd, rest := args[1], args[2:]
	var err error
	switch cmd {
	case "run":
		err = runCmd(rest, stdout, stderr)
	case "render":
		err = renderCmd(rest, stdout, stderr)
	case "explain":
		err = explainCmd(rest, stdout, stderr)
	case "cleanup":
		err = cleanupCmd(rest, stderr)
	case "init":
		err = initCmd(rest, stderr)
	case "allocator":
		err = allocatorCmd(rest, stderr)
	case "version", "--version", "-version":
		fmt.Fprintf(stdout, "nftproxy %s\n", Version)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "nftproxy: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "nftproxy %s: %v\n", cmd, err)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "nftproxy %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

// usageError is a mistake in the command line (exit code 2).
type usageError struct{ error }

// parseFlags parses a command's flags: o's of scope, then those extra registers.
func parseFlags(name string, o *Options, scope flagScope, args []string, stderr io.Writer, extra ...func(*flag.FlagSet)) error {
	fs := flag.NewFlagSet("nftproxy "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	o.register(fs, scope)
	for _, r := range extra {
		r(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage of nftproxy %s:\n", name)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q: every setting is a flag", strings.Join(fs.Args(), " "))}
	}
	if scope >= renderFlags {
		if err := o.applyConfigFile(fs, scope); err != nil {
			return usageError{err}
		}
	}
	return nil
}

func newLogger(v int, w io.Writer) logr.Logger {
	return textlogger.NewLogger(textlogger.NewConfig(textlogger.Verbosity(v), textlogger.Output(w)))
}

func cleanupCmd(args []string, stderr io.Writer) error {
	var o Options
	var kubeProxy bool
	if err := parseFlags("cleanup", &o, cleanupFlags, args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&kubeProxy, "kube-proxy", false, "instead of nftproxy's tables, delete kube-proxy's: its nftables tables (ip and ip6 kube-proxy) and, in the iptables-nft tables filter, nat and mangle, the chains kube-proxy creates, known by exact name (KUBE-SERVICES, KUBE-NODEPORTS, ...; KUBE-SVC-, KUBE-SEP-, ... followed by its 16-character hash), and the rules jumping to them; other KUBE-* chains stay (kubelet's KUBE-FIREWALL, kube-router's KUBE-ROUTER-*, KUBE-NWPLCY-*, ...)")
	}); err != nil {
		return err
	}
	if !kubeProxy {
		if err := checkTableName(o.Table); err != nil {
			return usageError{err}
		}
	}
	log := newLogger(o.Verbosity, stderr)
	k, err := nft.NewKernel()
	if err != nil {
		return fmt.Errorf("open netlink: %w (cleanup needs CAP_NET_ADMIN)", err)
	}
	defer k.Close()
	ctx := context.Background()
	if kubeProxy {
		return cleanupKubeProxy(ctx, log, k)
	}
	if err := checkTableOwned(ctx, k, o.Table); err != nil {
		return usageError{err}
	}
	tx := nft.NewTransaction(nft.Table{})
	for _, fam := range []nft.Family{nft.IPv4, nft.IPv6} {
		names, err := k.ListTables(ctx, fam)
		if err != nil {
			return fmt.Errorf("list %s tables: %w", fam, err)
		}
		for _, n := range names {
			if n == o.Table {
				tx.Table = nft.Table{Family: fam, Name: n}
				tx.Delete(&nft.TableObj{})
			}
		}
	}
	if tx.Len() == 0 {
		log.Info("nothing to clean up: no nftproxy tables", "table", o.Table)
		return nil
	}
	if _, err := k.Apply(ctx, tx); err != nil {
		return fmt.Errorf("delete tables: %w", err)
	}
	log.Info("deleted nftproxy tables", "count", tx.Len(), "table", o.Table)
	return nil
}
