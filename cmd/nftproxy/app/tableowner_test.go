package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/netns"
)

// mainIn runs the command line inside ns: run and cleanup must never reach the host's tables,
// even when the guard under test is missing.
func mainIn(t *testing.T, ns *netns.NS, args ...string) (int, string) {
	t.Helper()
	var code int
	var out bytes.Buffer
	if err := ns.Do(func() error {
		code = Main(append([]string{"nftproxy"}, args...), &out, &out)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return code, out.String()
}

// exampleDir is a manifest directory with the deploy examples (Services, a Node).
func exampleDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	ex, err := filepath.Glob("../../../deploy/examples/*.yaml")
	if err != nil || len(ex) == 0 {
		t.Fatalf("examples not found: %v", err)
	}
	for _, f := range ex {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// --table naming iptables-nft's or kube-proxy's table is refused by run, render and cleanup
// before anything is read or written: INPUT's rules would vanish under our base chains, and
// cleanup would delete iptables' whole table.
func TestTableOfAnotherOwnerRefused(t *testing.T) {
	ns := netns.New(t, "nftp-tblname")
	if _, err := ns.RunStdin("table ip filter {\n chain INPUT { type filter hook input priority 0; policy accept; tcp dport 22 accept; }\n}\n", "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	before := listRuleset(t, ns)
	dir := exampleDir(t)
	for name, owner := range map[string]string{"filter": "iptables-nft", "nat": "iptables-nft", "mangle": "iptables-nft",
		"raw": "iptables-nft", "security": "iptables-nft", "kube-proxy": "kube-proxy", "": "empty"} {
		for _, args := range [][]string{
			{"run", "--once", "--manifests", dir, "--node-name", "node-a", "--table", name},
			{"render", "--manifests", dir, "--node-name", "node-a", "--table", name},
			{"cleanup", "--table", name},
		} {
			code, out := mainIn(t, ns, args...)
			if code != 2 || !strings.Contains(out, "--table") || !strings.Contains(out, owner) {
				t.Errorf("%s: exit %d, output %q; want exit 2 naming --table and %s", strings.Join(args, " "), code, short(out), owner)
			}
		}
	}
	if after := listRuleset(t, ns); after != before {
		t.Errorf("ruleset changed:\n%s\nwant:\n%s", after, before)
	}
}

// An existing table nftproxy did not create is neither written by run nor deleted by cleanup;
// a table run created is recognised as nftproxy's by the next run and by cleanup.
func TestExistingForeignTableRefused(t *testing.T) {
	ns := netns.New(t, "nftp-tblown")
	foreign := "table ip mine {\n\tchain input {\n\t\ttype filter hook input priority 0; policy accept;\n\t\ttcp dport 22 accept\n\t}\n}\ntable ip6 other {\n\tset s {\n\t\ttype ipv6_addr\n\t}\n}\n"
	if _, err := ns.RunStdin(foreign, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	before := listRuleset(t, ns)
	dir := exampleDir(t)
	for _, c := range []struct{ table, family string }{{"mine", "ip mine"}, {"other", "ip6 other"}} {
		for _, args := range [][]string{
			{"run", "--once", "--manifests", dir, "--node-name", "node-a", "--table", c.table},
			{"cleanup", "--table", c.table},
		} {
			code, out := mainIn(t, ns, args...)
			if code != 2 || !strings.Contains(out, "--table "+c.table) || !strings.Contains(out, c.family+" exists and nftproxy did not create it") {
				t.Errorf("%s: exit %d, output %q; want exit 2 naming --table and the table", strings.Join(args, " "), code, short(out))
			}
		}
	}
	if after := listRuleset(t, ns); after != before {
		t.Errorf("foreign tables changed:\n%s\nwant:\n%s", after, before)
	}
	// Ours: created by run, recognised again by run and by cleanup.
	for i := 0; i < 2; i++ {
		if code, out := mainIn(t, ns, "run", "--once", "--manifests", dir, "--node-name", "node-a", "--table", "ours"); code != 0 {
			t.Fatalf("run --once --table ours (%d): exit %d: %s", i+1, code, out)
		}
	}
	if code, out := mainIn(t, ns, "cleanup", "--table", "ours"); code != 0 {
		t.Fatalf("cleanup --table ours: exit %d: %s", code, out)
	}
	if after := listRuleset(t, ns); after != before {
		t.Errorf("after run and cleanup of our own table:\n%s\nwant:\n%s", after, before)
	}
}

// short keeps a failure message readable when a command printed a whole ruleset.
func short(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}
