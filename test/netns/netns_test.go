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

// Open reaches a namespace it did not create (here one of New's, by its path, as the node
// tier reaches a container's through /proc/PID/ns/net): Run and Do act inside it, and Close
// leaves it in place for its owner.
func TestOpenBorrows(t *testing.T) {
	owner := New(t, "nftp-own")
	if _, err := owner.Run("ip", "link", "add", "probe0", "type", "veth", "peer", "name", "probe1"); err != nil {
		t.Fatal(err)
	}
	b, err := Open("borrowed", "/run/netns/"+owner.Name)
	if err != nil {
		t.Fatal(err)
	}
	out, err := b.Run("ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "probe0") {
		t.Errorf("Run in the opened namespace does not see its link probe0:\n%s", out)
	}
	var names []string
	if err := b.Do(func() error {
		ifs, err := net.Interfaces()
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(names, " "), "probe0") {
		t.Errorf("Do in the opened namespace sees %v, want probe0 among them", names)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Run("ip", "link", "show", "probe0"); err != nil {
		t.Errorf("the owner's namespace is gone after the borrower closed it: %v", err)
	}
}
