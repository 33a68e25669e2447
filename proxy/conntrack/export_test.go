package conntrack

import (
	"context"
	"net/netip"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// WithNetNSFd opens the netlink socket in the network namespace of fd, for the tests in package
// conntrack_test, which each run in a private one.
func WithNetNSFd(fd int) Option { return func(o *options) { o.nsFd = fd } }

// NewHookOver is NewHook over any cleaner (a fake that fails, in tests).
func NewHookOver(c interface {
	Cleanup(ctx context.Context, targets []Target) (Result, error)
}) *Hook {
	return newHook(c)
}

// AfterChanges is AfterCommit without a proxier: changed and full as a Commit's Changed and
// Full, and the addresses node ports are served on.
func (h *Hook) AfterChanges(ctx context.Context, changed map[model.ServiceKey]*model.Service, full bool, nodeAddrs []netip.Addr) error {
	return h.afterChanges(ctx, changed, full, func() []netip.Addr { return nodeAddrs })
}
