package netns

import (
	"net"
	"strings"
	"testing"
)

func TestNamespaceIsPrivate(t *testing.T) {
	ns := New(t, "nftp-ns")
	out, err := ns.Run("ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(strings.TrimSpace(out), "\n") + 1; got != 1 {
		t.Fatalf("fresh namespace has %d links, want only lo:\n%s", got, out)
	}
	var ln net.Listener
	if err := ns.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out, err = ns.Run("ss", "-Htln")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, ln.Addr().String()) {
		t.Fatalf("listener %s opened via Do is not in the namespace; ss says:\n%s", ln.Addr(), out)
	}
}
