package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/sysctl"
)

// registerConntrackFlags registers kube-proxy's --conntrack-* flags, with its names, defaults
// and meanings, on fs, filling c.
func registerConntrackFlags(fs *flag.FlagSet, c *sysctl.Conntrack) {
	d := sysctl.Defaults()
	*c = d
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
	fs := flag.NewFlagSet("nftproxy init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&v, "v", 0, "log verbosity (2: also the sysctls already set)")
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
	return RunInit(newLogger(v, stderr), c, sysctl.Host())
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
