package nodeaddr

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netns"

	tnetns "github.com/nftproxy/nftproxy/test/netns"
)

// TestWatchFollowsAddresses: in a fresh namespace (addresses on its loopback), Watch reports the addresses at start and each
// address added or removed afterwards, both families.
func TestWatchFollowsAddresses(t *testing.T) {
	ns := tnetns.New(t, "nftp-nodeaddr")
	if _, err := ns.Run("ip", "link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Run("ip", "address", "add", "198.18.0.1/24", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	h := netns.NsHandle(ns.Fd())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan []netip.Addr, 16)
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, logr.Discard(), Options{Namespace: &h}, func(a []netip.Addr) { got <- a })
	}()
	waitFor := func(what string, cond func([]netip.Addr) bool) {
		t.Helper()
		for {
			select {
			case a := <-got:
				if cond(a) {
					return
				}
			case <-ctx.Done():
				t.Fatalf("%s: not reported", what)
			}
		}
	}
	has := func(s string) func([]netip.Addr) bool {
		return func(a []netip.Addr) bool { return slices.Contains(a, netip.MustParseAddr(s)) }
	}
	waitFor("the address present at start", has("198.18.0.1"))
	if _, err := ns.Run("ip", "address", "add", "fd00::1/64", "dev", "lo", "nodad"); err != nil {
		t.Fatal(err)
	}
	waitFor("an IPv6 address added", has("fd00::1"))
	if _, err := ns.Run("ip", "address", "del", "198.18.0.1/24", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	waitFor("an address removed", func(a []netip.Addr) bool { return !has("198.18.0.1")(a) && has("fd00::1")(a) })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
}
