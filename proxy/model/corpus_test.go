package model_test

import (
	"net/netip"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/manifest"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// expectKey is the test-only annotation on every corpus Service: "accepted", the Reason it must
// be rejected with, or "partial:" and the Reason it is served in part for.
const expectKey = "test.nftproxy.io/expect"

// TestInvalidCorpus loads testdata/invalid (one file per rejection reason plus valid canaries) the
// way file mode does and checks each Service's fate. The canaries prove that one bad Service
// does not take the others down.
func TestInvalidCorpus(t *testing.T) {
	objs, errs := manifest.Load("testdata/invalid")
	if len(errs) != 0 {
		t.Fatalf("loading corpus: %v", errs)
	}
	reserved, err := model.ParsePortSpans(model.DefaultReservedPorts)
	if err != nil {
		t.Fatal(err)
	}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard(),
		Guard: model.GuardConfig{ReservedPorts: reserved, BlockRange: model.PortSpan{First: 20000, Last: 29999},
			ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:96::/108")}}})
	manifest.NewFeeder(tr).Feed(objs, errs)
	snap := tr.Snapshot()
	covered := map[string]bool{}
	svcs := objs.Services
	for _, r := range objs.Refused { // refused by the loader's API validation, fed as rejected
		svcs = append(svcs, r.Service)
	}
	for _, svc := range svcs {
		want := svc.Annotations[expectKey]
		key := model.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
		covered[want] = true
		t.Run(key.String(), func(t *testing.T) {
			got := snap.Services[key]
			if got == nil {
				t.Fatalf("no model; want %s", want)
			}
			if reason, ok := strings.CutPrefix(want, "partial:"); ok {
				w := got.Withheld
				if got.Rejected != nil || len(got.Ports) == 0 || w == nil || !w.Partial || w.Reason != reason {
					t.Fatalf("rejected = %+v, %d ports, withheld %+v; want served in part, withholding for %s", got.Rejected, len(got.Ports), w, reason)
				}
				if !strings.HasPrefix(w.Message, "service "+key.String()+": ") {
					t.Fatalf("message = %q; want it to start with the service key", w.Message)
				}
				return
			}
			if want == "accepted" {
				if got.Rejected != nil || got.Withheld != nil || len(got.Ports) == 0 {
					t.Fatalf("rejected = %+v, withheld %+v, %d ports; want accepted with ports", got.Rejected, got.Withheld, len(got.Ports))
				}
				return
			}
			if got.Rejected == nil || got.Rejected.Reason != want {
				t.Fatalf("rejection = %+v; want reason %s", got.Rejected, want)
			}
			if !strings.HasPrefix(got.Rejected.Message, "service "+key.String()+": ") {
				t.Fatalf("message = %q; want it to start with the service key", got.Rejected.Message)
			}
		})
	}
	t.Run("every reason has a corpus file", func(t *testing.T) {
		var missing []string
		for _, r := range model.AllReasons() {
			// KernelRefused: no input is meant to produce it; NodePortNotAssigned comes from manifest
			// mode's node-port assigner, never from the model (proxy/manifest/pipeline tests it);
			// CostLimit from the sync loop, which counts what the builder made (proxy/proxier).
			if !covered[r] && r != model.ReasonKernelRefused && r != model.ReasonNodePortNotAssigned && r != model.ReasonCostLimit {
				missing = append(missing, r)
			}
		}
		if len(missing) != 0 || !covered["accepted"] {
			t.Fatalf("reasons without a corpus Service: %v (canary present: %v); want none missing and a canary", missing, covered["accepted"])
		}
	})
}

// TestReasonsDocumented checks REASONS.md has a section for every reason and no stale ones.
func TestReasonsDocumented(t *testing.T) {
	doc, err := os.ReadFile("REASONS.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, line := range strings.Split(string(doc), "\n") {
		if name, ok := strings.CutPrefix(line, "## "); ok {
			documented = append(documented, strings.Trim(name, "` "))
		}
	}
	want := model.AllReasons()
	sort.Strings(documented)
	sort.Strings(want)
	if strings.Join(documented, ",") != strings.Join(want, ",") {
		t.Fatalf("REASONS.md sections = %v; want %v", documented, want)
	}
}
