package proxier

import (
	"context"
	"net/netip"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// Hook is work that must follow the committed rules, never precede them: stale UDP conntrack
// entries are deleted only once the new rules are in (deleting them earlier would let the next
// datagram be DNATed by the old rules), and the health-check node ports report what is
// committed. The proxier runs its hooks after every successful sync, in the order added, from
// the sync goroutine; it knows nothing of what they do.
type Hook interface {
	// AfterCommit is told what the sync committed. c and what it holds are read-only and valid
	// during the call. An error is logged; it never fails the sync (the rules are committed).
	AfterCommit(ctx context.Context, c *Commit) error
}

// Retrier is a Hook that can leave work to retry after a later sync (a conntrack cleanup that
// failed). While RetryPending reports true, the runner syncs again (about once a second, see
// PendingCleanup) even when nothing changed, so the hook runs again.
type Retrier interface {
	RetryPending() bool
}

// Commit is what one successful sync committed, as its hooks see it.
type Commit struct {
	// Changed maps every Service the sync programmed, changed or removed to the model now in
	// the kernel (nil: removed, or taken out after the kernel refused it). Changes of syncs that
	// failed since the last successful one are included. On the first sync and after a Node
	// change every Service is in it.
	Changed map[model.ServiceKey]*model.Service
	// Full is set when the sync read the kernel back.
	Full bool

	p *Proxier
}

// NodePortAddrs are the addresses node ports are served on, every family. Computed when asked.
func (c *Commit) NodePortAddrs() []netip.Addr {
	var out []netip.Addr
	for _, b := range c.p.builders {
		out = append(out, b.NodePortAddrs(c.p.node)...)
	}
	return out
}

// Snapshot is the whole model as the source holds it now. Taken when asked: a hook that
// needs only Changed costs no snapshot.
func (c *Commit) Snapshot() model.Snapshot { return c.p.src.Snapshot() }

type namedHook struct {
	name string
	h    Hook
}

// AddHook adds h, named name in logs, to what runs after every successful sync. Add hooks
// before the first Sync (Run): hooks are registered after construction, so a hook may read
// state that needs the Proxier or its Runner (the health-check node ports ask the health state,
// which reads the Runner's status).
func (p *Proxier) AddHook(name string, h Hook) {
	p.hooks = append(p.hooks, namedHook{name, h})
}

// stage records that the sync about to commit programs key as svc (nil: removed). Models are
// shared with the source and never modified, so only the pointer is kept.
func (p *Proxier) stage(key model.ServiceKey, svc *model.Service) {
	p.changed[key] = svc
}

// afterCommit hands what was committed to the hooks and forgets it. Failures are logged, never
// fail the sync.
func (p *Proxier) afterCommit(ctx context.Context, full bool) {
	c := &Commit{Changed: p.changed, Full: full, p: p}
	p.changed = map[model.ServiceKey]*model.Service{}
	for _, h := range p.hooks {
		if err := h.h.AfterCommit(ctx, c); err != nil {
			p.log.Error(err, "after-commit step failed; the rules are committed", "hook", h.name)
		}
	}
}
