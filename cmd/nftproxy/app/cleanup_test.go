package app

import (
	"bytes"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/netns"
)

// Another writer's tables (one even called like ours, in the inet family) survive cleanup;
// ours go in both families.
func TestCleanupDeletesExactlyOurTables(t *testing.T) {
	ns := netns.New(t, "nftp-clean")
	setup := `
table ip nftproxy {
	map service-allports {
		type ipv4_addr . inet_proto : verdict
	}
	chain c {
		type nat hook prerouting priority -100;
	}
}
table ip6 nftproxy {
	map service-allports {
		type ipv6_addr . inet_proto : verdict
	}
	set s {
		type ipv6_addr
	}
}
table inet nftproxy {
	chain keep {
		type filter hook input priority 0;
	}
}
table ip other {
	chain keep {
		type filter hook forward priority 0;
	}
}
`
	if _, err := ns.RunStdin(setup, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	var code int
	var stderr bytes.Buffer
	if err := ns.Do(func() error {
		code = Main([]string{"nftproxy", "cleanup"}, &bytes.Buffer{}, &stderr)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("cleanup exit %d: %s", code, stderr.String())
	}
	out, err := ns.Run("nft", "list", "tables")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(strings.ReplaceAll(out, "\n", " "))
	want := "table inet nftproxy table ip other"
	if strings.Join(got, " ") != want {
		t.Errorf("tables after cleanup: %q, want %q", strings.Join(got, " "), want)
	}
	// A second cleanup has nothing to do and still succeeds.
	_ = ns.Do(func() error { code = Main([]string{"nftproxy", "cleanup"}, &bytes.Buffer{}, &stderr); return nil })
	if code != 0 {
		t.Errorf("second cleanup exit %d: %s", code, stderr.String())
	}
}
