package app

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

func TestCheckServiceCIDRs(t *testing.T) {
	addrs := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00::1")}
	for _, c := range []struct {
		cidrs string
		want  string // "" accepted, else in the error
	}{
		{"198.19.0.0/16", ""},
		{"198.19.0.0/16,fd00:19::/108", ""},
		{"", ""},
		{"198.18.0.0/15", "--service-cidr 198.18.0.0/15 contains 198.18.0.1"},
		{"198.19.0.0/16,fd00::/64", "--service-cidr fd00::/64 contains fd00::1"},
		{"127.0.0.0/8", "--service-cidr 127.0.0.0/8 contains 127.0.0.1"},
	} {
		var p prefixList
		if err := p.Set(c.cidrs); err != nil {
			t.Fatal(err)
		}
		err := checkServiceCIDRs(p, addrs, "test")
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%q: %v; want accepted", c.cidrs, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%q: %v; want an error containing %q", c.cidrs, err, c.want)
		}
	}
}

// run refuses a --service-cidr holding an address of the node's kernel, before the kernel is
// written: the drop of unallocated Service addresses would black-hole it (SSH, pods), and the
// lockout would outlive the daemon. A CIDR beside the node's addresses is programmed.
func TestRunRefusesServiceCIDROverNodeAddress(t *testing.T) {
	ns := netns.New(t, "nftp-svccidr")
	for _, cmd := range [][]string{
		{"ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1"},
		{"ip", "addr", "add", "198.18.0.1/24", "dev", "eth0"},
	} {
		if _, err := ns.Run(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	dir := exampleDir(t)
	base := []string{"run", "--once", "--manifests", dir, "--node-name", "node-a"}
	code, out := mainIn(t, ns, append(base, "--service-cidr", "198.18.0.0/15")...)
	if code != 2 || !strings.Contains(out, "--service-cidr 198.18.0.0/15 contains 198.18.0.1, an address of this node") {
		t.Errorf("run --service-cidr 198.18.0.0/15: exit %d, output %q; want exit 2 naming the flag, the CIDR and 198.18.0.1", code, short(out))
	}
	if rs := listRuleset(t, ns); rs != "" {
		t.Errorf("the refused run wrote the kernel:\n%s", short(rs))
	}
	if code, out := mainIn(t, ns, append(base, "--service-cidr", "198.19.0.0/16")...); code != 0 {
		t.Errorf("run --service-cidr 198.19.0.0/16: exit %d: %s", code, short(out))
	}
}

// render and explain --manifests refuse it too, from the Node manifest's addresses.
func TestRenderRefusesServiceCIDROverNodeManifest(t *testing.T) {
	dir := exampleDir(t)
	code, out, errOut := run("render", "--manifests", dir, "--node-name", "node-a", "--service-cidr", "198.18.0.0/24")
	if code != 2 || !strings.Contains(errOut, "--service-cidr 198.18.0.0/24 contains 198.18.0.1") || strings.Contains(out, "table ip") {
		t.Errorf("render: exit %d, stderr %q; want exit 2 naming the CIDR and the Node's address, no ruleset", code, short(errOut))
	}
	code, _, errOut = run("explain", "--manifests", dir, "--node-name", "node-a", "--service-cidr", "198.18.0.0/24", "default/web")
	if code == 0 || !strings.Contains(errOut, "--service-cidr 198.18.0.0/24 contains 198.18.0.1") {
		t.Errorf("explain --manifests: exit %d, stderr %q; want a refusal naming the CIDR", code, short(errOut))
	}
}

// An address only the Node object lists (a cloud's ExternalIP, 1:1 NAT) counts too: run --once
// and the daemon refuse before their first sync, once the source has delivered the Node.
func TestRunRefusesServiceCIDROverNodeObjectAddress(t *testing.T) {
	ns := netns.New(t, "nftp-svccidr-node") // holds no address: 198.18.0.1 is only the Node manifest's
	dir := exampleDir(t)
	args := []string{"--manifests", dir, "--node-name", "node-a", "--service-cidr", "198.18.0.0/24",
		"--healthz-bind-address", "", "--metrics-bind-address", ""}
	code, out := mainIn(t, ns, append([]string{"run", "--once"}, args...)...)
	if code != 2 || !strings.Contains(out, "--service-cidr 198.18.0.0/24 contains 198.18.0.1, an address of this node (its Node object's") {
		t.Errorf("run --once: exit %d, output %q; want exit 2 naming the flag, the CIDR and the Node's address", code, short(out))
	}

	bin := daemonBinary(t)
	cmd := ns.Command(append([]string{bin, "run"}, args...)...)
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(log.String(), "nothing programmed: --service-cidr 198.18.0.0/24 contains 198.18.0.1") {
			t.Errorf("daemon: %v, log %q; want exit 2 naming the flag, the CIDR and the Node's address", err, short(log.String()))
		}
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the daemon kept running with a service CIDR over the Node's address: %s", short(log.String()))
	}
	if rs := listRuleset(t, ns); rs != "" {
		t.Errorf("the refused daemon wrote the kernel:\n%s", short(rs))
	}
}

// An address the kernel gains inside --service-cidr after the start can no longer be refused;
// the daemon says so as an error instead of dropping its traffic silently.
func TestDaemonLogsAddressGainedInServiceCIDR(t *testing.T) {
	ns := netns.New(t, "nftp-svccidr-gain")
	cmd := ns.Command(daemonBinary(t), "run", "--manifests", exampleDir(t), "--node-name", "node-a", "--service-cidr", "198.19.0.0/16",
		"--healthz-bind-address", "", "--metrics-bind-address", "")
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	ctx := context.Background()
	const limit, every = 60 * time.Second, 50 * time.Millisecond
	alive := func() {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("the daemon exited: %v: %s", err, short(log.String()))
		default:
		}
	}
	tier.Until(t, ctx, limit, every, "first sync", func() (bool, string) {
		alive()
		out, err := ns.Run("nft", "list", "chain", "ip", "nftproxy", "services")
		return err == nil && strings.Contains(out, "vmap @service-ips"), out
	})
	if strings.Contains(log.String(), "inside --service-cidr") {
		t.Fatalf("logged before any address was added: %s", log.String())
	}
	if _, err := ns.Run("ip", "addr", "add", "198.19.5.5/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	tier.Until(t, ctx, limit, every, "the error about the gained address", func() (bool, string) {
		alive()
		l := log.String()
		return strings.Contains(l, "the node holds an address inside --service-cidr") && strings.Contains(l, "--service-cidr 198.19.0.0/16 contains 198.19.5.5"), l
	})
}
