package conntrack

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
)

// Hook deletes, after every sync, the stale UDP conntrack entries of the Services the sync
// changed (endpoints removed, ranges and all-ports included), so UDP flows move to live
// endpoints. It is a proxier.Hook: it runs only once the new rules are committed, since deleting
// an entry earlier would let the next datagram be DNATed by the old rules.
//
// A cleanup that fails is tried again after later syncs until it succeeds: a client that keeps
// sending keeps its entry alive, so a stale flow left by a failed cleanup would never time out
// (this is how a UDP Service stays black-holed for hours). The hook asks the proxier for those
// syncs (proxier.Retrier).
type Hook struct {
	cleaner cleaner
	memory  *memory
	// retry holds the frontends of failed cleanups; a flow to one of them is cleaned again,
	// against the serving endpoints of whoever owns that frontend by then.
	retry map[Frontend]struct{}
	// nodeAddrs are the node-port addresses of the last call.
	nodeAddrs []netip.Addr
	// skip is how many calls to let pass before the next retry, and backoff the current skip
	// after a failure (doubling to maxRetrySkip), so a conntrack socket that keeps failing is
	// not dumped again on every sync.
	skip, backoff int
}

// maxRetrySkip bounds the calls between two retries; the proxier syncs about once a second
// while a retry is pending, so a persistent failure is retried about once a minute.
const maxRetrySkip = 64

// cleaner is what the Hook needs of a Cleaner.
type cleaner interface {
	Cleanup(ctx context.Context, targets []Target) (Result, error)
}

var (
	_ proxier.Hook    = (*Hook)(nil)
	_ proxier.Retrier = (*Hook)(nil)
)

// NewHook returns a Hook cleaning through c. Its first call cleans every UDP frontend
// committed (flows left from before a restart).
func NewHook(c *Cleaner) *Hook { return newHook(c) }

func newHook(c cleaner) *Hook {
	return &Hook{cleaner: c, memory: newMemory(), retry: map[Frontend]struct{}{}}
}

// AfterCommit cleans the flows of c.Changed that may be stale, and retries failed cleanups.
// After a full sync (the first, the periodic resync, a repair), and when the addresses node
// ports are served on changed, it sweeps every UDP Service: an
// entry that escaped the cleanup of its change (a datagram still passing the old rules while
// the new ones were committed and the table was read) goes then, as upstream kube-proxy's
// reconciler, which checks every Service after every sync, would delete it.
func (h *Hook) AfterCommit(ctx context.Context, c *proxier.Commit) error {
	return h.afterChanges(ctx, c.Changed, c.Full, c.NodePortAddrs)
}

// RetryPending reports whether a failed cleanup waits for a later sync (proxier.Retrier).
func (h *Hook) RetryPending() bool { return len(h.retry) > 0 }

func (h *Hook) afterChanges(ctx context.Context, changed map[model.ServiceKey]*model.Service, full bool, nodePortAddrs func() []netip.Addr) error {
	changes := h.memory.changes(changed)
	// A node-port address the node did not serve before may carry flows that reached the node
	// untranslated (a VIP moving to this node): sweep, as after a full sync.
	nodeAddrs := nodePortAddrs()
	if !slices.Equal(nodeAddrs, h.nodeAddrs) {
		full, h.nodeAddrs = true, slices.Clone(nodeAddrs)
	}
	if full {
		changes = h.memory.sweep(changes)
	}
	retrying := len(h.retry) > 0 && h.skip == 0
	if h.skip > 0 {
		h.skip--
	}
	if len(changes) == 0 && !retrying {
		return nil
	}
	targets := Targets(nodeAddrs, changes)
	if retrying {
		targets = append(targets, h.retryTargets(nodeAddrs)...)
	}
	if len(targets) == 0 {
		return nil
	}
	if _, err := h.cleaner.Cleanup(ctx, targets); err != nil {
		for _, t := range targets {
			for _, f := range t.Frontends {
				h.retry[f] = struct{}{}
			}
		}
		h.backoff = min(max(2*h.backoff, 1), maxRetrySkip)
		h.skip = h.backoff - 1 // the first retry comes with the next sync
		return fmt.Errorf("stale UDP conntrack cleanup failed (retried after later syncs): %w", err)
	}
	if retrying {
		clear(h.retry)
		h.skip, h.backoff = 0, 0
	}
	return nil
}

// retryTargets cleans the frontends of failed cleanups again: each with nothing to keep, and
// every UDP port now owning a frontend that overlaps one of them with its serving endpoints, so
// that (a flow stays when any target matching it keeps its reply source) exactly the flows that
// reach no serving endpoint of their frontend's present owner go.
func (h *Hook) retryTargets(nodeAddrs []netip.Addr) []Target {
	var out []Target
	pending := make([]Frontend, 0, len(h.retry))
	for f := range h.retry {
		pending = append(pending, f)
		out = append(out, Target{Frontends: []Frontend{f}})
	}
	for _, s := range h.memory.synced {
		for _, sp := range udpPorts(s) {
			fs := frontends(sp, nodeAddrs)
			if overlapsAny(fs, pending) {
				out = append(out, Target{Port: sp.Name, Frontends: fs, Keep: serving(sp)})
			}
		}
	}
	return out
}

func overlapsAny(fs, others []Frontend) bool {
	for _, f := range fs {
		for _, o := range others {
			if f.overlaps(o) {
				return true
			}
		}
	}
	return false
}

// overlaps reports whether a flow could be sent to both f and o.
func (f Frontend) overlaps(o Frontend) bool {
	if f.First > o.Last || o.First > f.Last {
		return false
	}
	return !f.Addr.IsValid() || !o.Addr.IsValid() || f.Addr == o.Addr
}
