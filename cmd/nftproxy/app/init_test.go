package app

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/netns"
)

// init writes the per-namespace conntrack sysctls of a fresh network namespace, read back from
// its /proc/sys; nf_conntrack_max, which the kernel keeps in the initial namespace only, is
// skipped with the reason logged, and the host's value stays as it was.
func TestInitSetsConntrackSysctlsInNamespace(t *testing.T) {
	ns := netns.New(t, "nftp-init")
	// The conntrack sysctls appear once nf_conntrack is loaded; any conntrack rule loads it.
	if _, err := ns.RunStdin("table ip load { chain c { ct state new; }; }", "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	hostMax, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_max")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"nftproxy", "init",
		"--conntrack-max-per-core=1", "--conntrack-min=7",
		"--conntrack-tcp-timeout-established=20m34s", "--conntrack-tcp-timeout-close-wait=77s",
		"--conntrack-tcp-be-liberal",
		"--conntrack-udp-timeout=31s", "--conntrack-udp-timeout-stream=151s"}
	var code int
	var stderr bytes.Buffer
	if err := ns.Do(func() error { code = Main(args, &bytes.Buffer{}, &stderr); return nil }); err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("init exit %d: %s", code, stderr.String())
	}
	want := map[string]string{
		"nf_conntrack_tcp_timeout_established": "1234",
		"nf_conntrack_tcp_timeout_close_wait":  "77",
		"nf_conntrack_tcp_be_liberal":          "1",
		"nf_conntrack_udp_timeout":             "31",
		"nf_conntrack_udp_timeout_stream":      "151",
		"nf_conntrack_max":                     strings.TrimSpace(string(hostMax)),
	}
	for name, v := range want {
		out, err := ns.Run("cat", "/proc/sys/net/netfilter/"+name)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out); got != v {
			t.Errorf("%s in the namespace = %s, want %s", name, got, v)
		}
	}
	if !strings.Contains(stderr.String(), `"Not setting sysctl" entry="net/netfilter/nf_conntrack_max"`) {
		t.Errorf("no logged reason for leaving nf_conntrack_max; log:\n%s", stderr.String())
	}
	// The host's own timeouts are untouched.
	if b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_close_wait"); err != nil || strings.TrimSpace(string(b)) == "77" {
		t.Errorf("host close-wait timeout %q (%v): init wrote outside its namespace", b, err)
	}
}

// loadConntrack leaves nothing behind: its table goes in the next batch, and a second call
// works the same. (Whether it loads the module cannot be shown here: the host has it loaded.)
func TestLoadConntrackLeavesNoTable(t *testing.T) {
	ns := netns.New(t, "nftp-initload")
	for i := 0; i < 2; i++ {
		if err := ns.Do(func() error { return loadConntrack(context.Background()) }); err != nil {
			t.Fatalf("loadConntrack #%d: %v", i+1, err)
		}
	}
	out, err := ns.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(out) != "" {
		t.Errorf("ruleset after loadConntrack:\n%s\nwant empty", out)
	}
}
