package property

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// PureResult is what the pure path made of a batch.
type PureResult struct {
	Snapshot model.Snapshot
	// Rulesets are the desired tables, one per family; Text is their `nftproxy render` text.
	Rulesets []*nft.Ruleset
	Text     string
	Failures []Failure
}

// RunPure sends a batch down the path `nftproxy render` takes (tracker, builders, renderer) and
// through the reconciler into the fake kernel, and checks the property on each step.
func RunPure(b *Batch, nodeIPs []netip.Addr) (res PureResult) {
	builders, err := newBuilders(b.Node.Name)
	if err != nil {
		return PureResult{Failures: []Failure{{What: err.Error()}}}
	}
	tr := newTracker(b.Node.Name)
	tr.SetLocalAddresses(b.LocalIPs)
	feed(tr, b)
	res.Snapshot = tr.Snapshot()
	res.Failures = append(res.Failures, checkOutcomes(b, res.Snapshot)...)
	res.Failures = append(res.Failures, checkFragments(b, builders, res.Snapshot)...)
	for _, bl := range builders {
		rs := bl.Ruleset(res.Snapshot.Node, res.Snapshot.Sorted())
		res.Rulesets = append(res.Rulesets, rs)
		res.Text += nft.Render(nft.Canonical(rs))
		res.Failures = append(res.Failures, checkNodeSafety(rs, append(slices.Clone(nodeIPs), b.LocalIPs...))...)
	}
	res.Failures = append(res.Failures, applyFake(tr, builders, res.Rulesets)...)
	return res
}

// applyFake runs one full sync of the tracker into nft.Fake (which validates every operation
// like the kernel) and compares the fake's tables with the desired ones.
func applyFake(tr *model.Tracker, builders []*ruleset.Builder, want []*nft.Ruleset) []Failure {
	fake := nft.NewFake()
	p := proxier.New(tr, fake, builders, nil, logr.Discard(), time.Now)
	if _, err := p.Sync(context.Background(), true); err != nil {
		return []Failure{{What: fmt.Sprintf("the sync failed as a whole in the fake kernel: %v", err)}}
	}
	var out []Failure
	for i, bl := range builders {
		got, err := fake.Dump(context.Background(), bl.Table())
		if err != nil {
			out = append(out, Failure{What: fmt.Sprintf("dump %s from the fake: %v", bl.Table(), err)})
			continue
		}
		if d := nft.Diff(nft.Canonical(got), nft.Canonical(want[i])); d != "" {
			out = append(out, Failure{What: fmt.Sprintf("the fake's %s differs from the rendered ruleset (- fake, + render):\n%s", bl.Table(), d)})
		}
	}
	return out
}
