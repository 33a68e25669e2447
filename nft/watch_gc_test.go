package nft

import (
	"testing"
	"time"
)

// TestKernelWatchIgnoresExpiry: set elements that time out (the affinity sets, filled from the
// packet path) are collected by the kernel; that is not a foreign change.
func TestKernelWatchIgnoresExpiry(t *testing.T) {
	h := newWatchHarness(t)
	g := h.nft("table ip nftproxy {\n set aff { type ipv4_addr; flags dynamic,timeout; timeout 1s; }\n}\nadd element ip nftproxy aff { 198.18.0.9 timeout 1s, 198.18.0.10 timeout 1s }\n")
	if f := h.next("set created"); f.Gen != g {
		t.Fatalf("first report %+v, want generation %d", f, g)
	}
	time.Sleep(3 * time.Second) // past the timeout and a GC run
	out, _ := h.ns.Run("nft", "list", "set", "ip", "nftproxy", "aff")
	t.Logf("after expiry:\n%s", out)
	h.sentinel("elements expired")
}
