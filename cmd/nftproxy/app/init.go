package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/cmd/nftproxy/app/kpconfig"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/sysctl"
)

// registerConntrackFlags registers kube-proxy's --conntrack-* flags, with its names, defaults
// and meanings, on fs, filling c.
func registerConntrackFlags(fs *flag.FlagSet, c *sysctl.Conntrack) {
	*c = sysctl.Defaults()
	conntrackFlags(fs, c)
}

// conntrackFlags registers the --conntrack-* flags on fs, filling c, with c's values as their
// defaults.
func conntrackFlags(fs *flag.FlagSet, c *sysctl.Conntrack) {
	d := *c
	fs.Var(int32Value{&c.MaxPerCore}, "conntrack-max-per-core", "nf_conntrack_max per CPU (0 to leave the limit as-is and ignore --conntrack-min)")
	fs.Var(int32Value{&c.Min}, "conntrack-min", "least nf_conntrack_max, whatever --conntrack-max-per-core gives")
	fs.DurationVar(&c.TCPEstablishedTimeout, "conntrack-tcp-timeout-established", d.TCPEstablishedTimeout, "idle timeout of established TCP connections (0 to leave as-is)")
	fs.DurationVar(&c.TCPCloseWaitTimeout, "conntrack-tcp-timeout-close-wait", d.TCPCloseWaitTimeout, "idle timeout of TCP connections in CLOSE_WAIT (0 to leave as-is)")
	fs.BoolVar(&c.TCPBeLiberal, "conntrack-tcp-be-liberal", d.TCPBeLiberal, "set nf_conntrack_tcp_be_liberal to 1: out-of-window TCP packets are not marked INVALID (false leaves it as-is)")
	fs.DurationVar(&c.UDPTimeout, "conntrack-udp-timeout", d.UDPTimeout, "idle timeout of UNREPLIED UDP flows (0 to leave as-is)")
	fs.DurationVar(&c.UDPStreamTimeout, "conntrack-udp-timeout-stream", d.UDPStreamTimeout, "idle timeout of ASSURED UDP flows (0 to leave as-is)")
}

// int32Value is a flag.Value for the int32 fields of kube-proxy's configuration.
type int32Value struct{ p *int32 }

func (v int32Value) String() string {
	if v.p == nil {
		return "0"
	}
	return fmt.Sprint(*v.p)
}

func (v int32Value) Set(s string) error {
	var n int32
	if _, err := fmt.Sscan(strings.TrimSpace(s), &n); err != nil {
		return fmt.Errorf("%q is not a 32-bit integer", s)
	}
	*v.p = n
	return nil
}

// initCmd is kube-proxy's --init-only: the steps that need more than CAP_NET_ADMIN (today the
// conntrack sysctls), run once by a privileged initContainer before the daemon starts.
func initCmd(args []string, stderr io.Writer) error {
	var c sysctl.Conntrack
	var v int
	var config string
	fs := flag.NewFlagSet("nftproxy init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&v, "v", 0, "log verbosity (2: also the sysctls already set)")
	fs.StringVar(&config, "config", "", "kube-proxy's configuration file (KubeProxyConfiguration): its conntrack section, which --conntrack-* flags given here override")
	registerConntrackFlags(fs, &c)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected arguments %q: every setting is a flag", strings.Join(fs.Args(), " "))}
	}
	if config != "" {
		var err error
		if c, err = conntrackFromConfig(fs, config); err != nil {
			return usageError{err}
		}
	}
	log := newLogger(v, stderr)
	if s := sysctl.Host(); !s.ConntrackLoaded() {
		if err := loadConntrack(context.Background()); err != nil {
			log.Error(err, "Cannot load nf_conntrack through nftables; its sysctls are missing")
		}
	}
	return RunInit(log, c, sysctl.Host())
}

// loadConntrackTable is a table that exists only while init loads nf_conntrack.
var loadConntrackTable = nft.Table{Family: nft.IPv4, Name: "nftproxy-init"}

// loadConntrack makes the kernel load nf_conntrack, whose sysctls exist only once it is loaded:
// on a fresh node nothing may have needed it yet (the daemon's own rules would, but init runs
// first). A rule matching "ct state new" in a regular chain (no hook: it sees no packet) needs
// it, so adding one loads the module, as nft would; the table is deleted again at once.
func loadConntrack(ctx context.Context) error {
	k, err := nft.NewKernel()
	if err != nil {
		return fmt.Errorf("open netlink: %w", err)
	}
	defer k.Close()
	tx := nft.NewTransaction(loadConntrackTable)
	tx.Add(&nft.TableObj{})
	tx.Add(&nft.Chain{Name: "load"})
	tx.Add(&nft.Rule{Chain: "load", Exprs: []nft.Expr{nft.CtState{Mask: nft.CtStateNew}}})
	_, err = k.Apply(ctx, tx)
	del := nft.NewTransaction(loadConntrackTable)
	del.Delete(&nft.TableObj{})
	if _, derr := k.Apply(ctx, del); derr != nil && !nft.IsNotFound(derr) {
		return errors.Join(err, fmt.Errorf("delete table %s: %w", loadConntrackTable, derr))
	}
	return err
}

// RunInit applies c to s: init's whole work, for callers that read c from a configuration
// file (kube-proxy's conntrack section) rather than from flags.
func RunInit(log logr.Logger, c sysctl.Conntrack, s sysctl.System) error {
	res, err := sysctl.Apply(log, s, c)
	if err != nil {
		return fmt.Errorf("conntrack sysctls: %w", err)
	}
	counts := map[sysctl.Outcome]int{}
	for _, r := range res {
		counts[r.Outcome]++
	}
	log.Info("init done", "written", counts[sysctl.Written], "unchanged", counts[sysctl.Unchanged], "skipped", counts[sysctl.Skipped])
	return nil
}

// conntrackFromConfig is the conntrack section of kube-proxy's configuration file at path, with
// the --conntrack-* flags given on the command line (as parsed in fs) taking precedence, as for
// run.
func conntrackFromConfig(fs *flag.FlagSet, path string) (sysctl.Conntrack, error) {
	cfg, err := kpconfig.Load(path)
	if err != nil {
		return sysctl.Conntrack{}, err
	}
	c, err := kpconfig.ConntrackOf(cfg.Conntrack)
	if err != nil {
		return sysctl.Conntrack{}, fmt.Errorf("--config %s: %w", path, err)
	}
	// The flags given on the command line, set again over the file's values.
	over := flag.NewFlagSet("conntrack", flag.ContinueOnError)
	conntrackFlags(over, &c)
	var setErr error
	fs.Visit(func(f *flag.Flag) {
		if over.Lookup(f.Name) != nil && setErr == nil {
			setErr = over.Set(f.Name, f.Value.String())
		}
	})
	if setErr != nil {
		return sysctl.Conntrack{}, setErr
	}
	return c, nil
}
