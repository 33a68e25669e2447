package reconciler_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/test/golden"
	"github.com/nftproxy/nftproxy/test/nfttest"
)

// A partial sync is a list of steps after the same starting state; each step changes the model
// (or only lets time pass) and commits. Its golden text is the script of every transaction sent.
type partialSync struct {
	name  string
	steps []func(h *harness)
	// nftRefuses is the error nft 1.0.6 gives for this sync's script although the kernel takes
	// the transaction (see TestKernelScriptEqualsApply); empty when nft loads it.
	nftRefuses string
}

// goldenStart is the state every partial sync starts from: svc-1 with 3 endpoints, svc-2 with 2
// (dual-stack, one TCP port with a node port each), synced in full.
func goldenStart(h *harness) {
	h.put(svc(1, 3), svc(2, 2))
	h.commit(false)
}

func goldenSvc(k string) model.ServiceKey { return model.ServiceKey{Namespace: "default", Name: k} }

// nftTypeofBug is nft 1.0.6's error for `add rule ... map @endpoints` when the map exists before
// the script (nft reads its typeof from the kernel): it happens as well when nft itself created
// the map, so no script can add a pick chain to a running table with that nft.
const nftTypeofBug = "conflicting protocols specified"

// partialSyncs are the changes the golden tests pin on the shared layout (proxy/ruleset/README.md).
func partialSyncs() []partialSync {
	return []partialSync{
		{"endpoint-change", []func(h *harness){func(h *harness) {
			// svc-1's second IPv4 endpoint is replaced: its slots from there on are rewritten in
			// the endpoint maps of every frontend, nothing else.
			s := svc(1, 3)
			s.Ports[0].Endpoints[2].Addr = netip.MustParseAddr("198.18.128.99")
			h.put(s)
		}}, ""},
		{"new-service", []func(h *harness){func(h *harness) {
			// 2 endpoints, a count in use: elements only, into the existing pick chains.
			h.put(svc(3, 2))
		}}, ""},
		{"service-removal", []func(h *harness){func(h *harness) {
			// svc-2 is the last user of the count-2 chains: its elements go, those chains are
			// flushed now and deleted one StaleChainDelay later (the second transaction).
			h.remove(goldenSvc("svc-2"))
		}, func(h *harness) { h.clk.advance(reconciler.StaleChainDelay) }}, ""},
		{"endpoint-count-change", []func(h *harness){func(h *harness) {
			// svc-1 goes from 3 to 2 endpoints, a count svc-2 uses: its dispatch elements move to
			// the count-2 chains, slot 2 goes, the count-3 chains are flushed now and deleted
			// one StaleChainDelay later.
			h.put(svc(1, 2))
		}, func(h *harness) { h.clk.advance(reconciler.StaleChainDelay) }}, ""},
		{"new-endpoint-count", []func(h *harness){func(h *harness) {
			// svc-1 goes from 3 to 4 endpoints, a count nobody uses: new count-4 chains whose
			// rules come before the elements that reach them, its dispatch elements move there,
			// a new slot 3, and the count-3 chains go later.
			h.put(svc(1, 4))
		}, func(h *harness) { h.clk.advance(reconciler.StaleChainDelay) }}, nftTypeofBug},
	}
}

// runPartialSync runs ps from goldenStart over kernel and returns the script of each partial
// transaction, with each run of element ops on one set sorted (nft.SortElementRuns).
func runPartialSync(t *testing.T, r *recorder, ps partialSync) string {
	h := newHarness(t, r)
	goldenStart(h)
	var b strings.Builder
	for i, step := range ps.steps {
		r.last = nil
		step(h)
		if res := h.commit(false); res.Full {
			t.Fatalf("step %d: commit was full, want partial", i+1)
		}
		fmt.Fprintf(&b, "# transaction %d\n", i+1)
		if r.last != nil {
			b.WriteString(nft.RenderTransaction(nfttest.SortElementRuns(r.last)))
		}
	}
	h.check()
	return b.String()
}

// TestPartialSyncGolden pins the exact ops of an endpoint change, a new Service, a Service
// removal and an endpoint-count change on the shared layout, as nft scripts in testdata/partial
// (`go test -run TestPartialSyncGolden -update` rewrites them; read the diff before committing).
//
// Elements within one run of element ops on one set are compared sorted: the reconciler sends a
// hash set's elements in map-iteration order on purpose (diff.go, orderElements), and that order
// means nothing to the kernel. Everything else is compared in the order sent, since it matters:
// deletes before adds, rules of a new chain before the elements that reach it, chains deleted a
// transaction after they were flushed.
func TestPartialSyncGolden(t *testing.T) {
	for _, ps := range partialSyncs() {
		t.Run(ps.name, func(t *testing.T) {
			got := runPartialSync(t, &recorder{Interface: nft.NewFake()}, ps)
			golden.Check(t, filepath.Join("testdata", "partial", ps.name+".nft"), got)
		})
	}
}
