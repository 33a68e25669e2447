// Package nodeaddr reads the addresses the kernel holds locally in nftproxy's network namespace
// and follows their changes. They feed the model's node-address guard (model.Tracker
// SetLocalAddresses): a Service must never capture the node's own addresses with all-ports, a
// port range or a reserved port, whether or not the Node object lists the address (a VIP, a
// second interface, loopback, the pod bridge). The model stays pure; this is its netlink side.
package nodeaddr

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Options tune Watch. The zero value watches the calling process's network namespace.
type Options struct {
	// Namespace is where to read addresses; nil means the current one. Tests pass a namespace
	// of their own.
	Namespace *netns.NsHandle
	// Retry is the pause before subscribing again after the kernel dropped the subscription
	// (default 1 s).
	Retry time.Duration
}

// List returns every address of every interface in the namespace (nil: the current one), both
// families, sorted and deduplicated.
func List(ns *netns.NsHandle) ([]netip.Addr, error) {
	var h *netlink.Handle
	var err error
	if ns != nil {
		h, err = netlink.NewHandleAt(*ns)
	} else {
		h, err = netlink.NewHandle()
	}
	if err != nil {
		return nil, fmt.Errorf("open netlink to read the node's addresses: %w", err)
	}
	defer h.Close()
	return list(h)
}

func list(h *netlink.Handle) ([]netip.Addr, error) {
	as, err := h.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("list the node's addresses over netlink: %w", err)
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if a.IPNet == nil {
			continue
		}
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

// Watch calls set with the namespace's addresses at once and again after every change, until ctx
// ends; set is called from one goroutine, only when the list changed. An address-update
// subscription tells it when to list again (listing the whole set keeps it simple and correct
// whatever updates were coalesced). A subscription the kernel drops (buffer overrun) is renewed
// after Options.Retry, listing again so nothing is missed. It returns an error only if the first
// list or subscription fails.
func Watch(ctx context.Context, log logr.Logger, opts Options, set func([]netip.Addr)) error {
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	var last []netip.Addr
	publish := func() error {
		addrs, err := List(opts.Namespace)
		if err != nil {
			return err
		}
		if last == nil || !slices.Equal(addrs, last) {
			last = addrs
			set(addrs)
		}
		return nil
	}
	for first := true; ; first = false {
		ch := make(chan netlink.AddrUpdate, 256)
		done := make(chan struct{})
		so := netlink.AddrSubscribeOptions{Namespace: opts.Namespace,
			ErrorCallback: func(err error) { log.V(2).Info("address subscription error; renewing it", "err", err) }}
		err := netlink.AddrSubscribeWithOptions(ch, done, so)
		if err == nil {
			// List after subscribing: a change made between the two is then seen twice, never missed.
			err = publish()
		}
		if err != nil {
			close(done)
			if first {
				return fmt.Errorf("follow the node's addresses: %w", err)
			}
			log.Error(err, "cannot follow the node's addresses; retrying", "in", opts.Retry)
		} else {
			follow(ctx, ch, publish, log)
			close(done)
		}
		if ctx.Err() != nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(opts.Retry):
		}
	}
}

// follow lists again after each batch of updates until ctx ends or the subscription closes.
func follow(ctx context.Context, ch <-chan netlink.AddrUpdate, publish func() error, log logr.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				return
			}
			// Coalesce what is already queued: one list per batch.
			for drained := false; !drained; {
				select {
				case _, ok := <-ch:
					if !ok {
						return
					}
				default:
					drained = true
				}
			}
			if err := publish(); err != nil {
				log.Error(err, "reading the node's addresses after a change failed; keeping the previous ones")
			}
		}
	}
}
