package conntrack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Observer receives what the Cleaner measures; metrics.Conntrack implements it. family is
// "IPv4" or "IPv6"; err is nil when every stale entry of that family went.
type Observer interface {
	ConntrackCleaned(family string, deleted int, d time.Duration, err error)
}

// Cleaner deletes stale UDP conntrack entries through one netlink socket. Not safe for
// concurrent use.
type Cleaner struct {
	h   *netlink.Handle
	log logr.Logger
	obs Observer
}

type options struct {
	nsFd int // the network namespace to open the socket in; -1: the caller's (tests set one)
	obs  Observer
}

// socketTimeout bounds each netlink send and receive, so a wedged kernel call cannot hold up the
// sync loop forever.
const socketTimeout = 10 * time.Second

// Option configures New.
type Option func(*options)

// WithObserver reports each family's deletions and duration to obs.
func WithObserver(obs Observer) Option { return func(o *options) { o.obs = obs } }

// New opens the netlink socket. Close releases it.
func New(log logr.Logger, opts ...Option) (*Cleaner, error) {
	o := options{nsFd: -1}
	for _, opt := range opts {
		opt(&o)
	}
	ns := netns.None()
	if o.nsFd >= 0 {
		ns = netns.NsHandle(o.nsFd)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("open conntrack netlink socket: %w (needs CAP_NET_ADMIN and the nf_conntrack_netlink module)", err)
	}
	if err := h.SetSocketTimeout(socketTimeout); err != nil {
		h.Close()
		return nil, fmt.Errorf("set conntrack netlink socket timeout: %w", err)
	}
	return &Cleaner{h: h, log: log, obs: o.obs}, nil
}

// Close releases the netlink socket.
func (c *Cleaner) Close() error {
	c.h.Close()
	return nil
}

// Result counts the entries Cleanup deleted.
type Result struct {
	IPv4, IPv6 int
}

// Total is IPv4 + IPv6.
func (r Result) Total() int { return r.IPv4 + r.IPv6 }

// Cleanup deletes every UDP conntrack entry whose original destination is a frontend of targets
// and whose reply source is kept by none of the targets containing that destination. It reads
// the conntrack table once per family that has targets (none: no kernel call). Entries the
// kernel already removed count as deleted. An error names the family; the other family is still
// cleaned, and the next sync's targets do not repeat these, so a caller that wants a retry passes
// the same targets again.
func (c *Cleaner) Cleanup(ctx context.Context, targets []Target) (Result, error) {
	var res Result
	var errs []error
	for _, fam := range []struct {
		name   string
		family netlink.InetFamily
		count  *int
	}{{"IPv4", unix.AF_INET, &res.IPv4}, {"IPv6", unix.AF_INET6, &res.IPv6}} {
		m := newMatcher(targets, fam.family == unix.AF_INET6)
		if m.empty() {
			continue
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("conntrack cleanup %s: %w", fam.name, err))
			break
		}
		start := time.Now()
		n, err := c.h.ConntrackDeleteFilters(netlink.ConntrackTable, fam.family, m)
		if errors.Is(err, netlink.ErrDumpInterrupted) {
			// The table changed during the dump: what was read was cleaned; read again for the rest.
			var more uint
			more, err = c.h.ConntrackDeleteFilters(netlink.ConntrackTable, fam.family, m)
			n += more
		}
		*fam.count = int(n)
		if c.obs != nil {
			c.obs.ConntrackCleaned(fam.name, int(n), time.Since(start), err)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("delete stale %s UDP conntrack entries (%d deleted): %w", fam.name, n, err))
			continue
		}
		if n > 0 {
			c.log.V(2).Info("deleted stale UDP conntrack entries", "family", fam.name, "entries", n, "targets", len(targets))
		}
	}
	return res, errors.Join(errs...)
}

// keep is the set of reply sources one target lets stay.
type keep struct {
	anyPort map[netip.Addr]struct{}
	exact   map[netip.AddrPort]struct{}
}

func (k *keep) has(src netip.Addr, port uint16) bool {
	if _, ok := k.anyPort[src]; ok {
		return true
	}
	_, ok := k.exact[netip.AddrPortFrom(src, port)]
	return ok
}

type rule struct {
	first, last uint16
	keep        *keep
}

// matcher is a netlink.CustomConntrackFilter over targets of one family, indexed by address so
// that a table dump costs one map lookup per entry whatever the number of targets.
type matcher struct {
	byAddr map[netip.Addr][]rule
	any    []rule // frontends without an address (node ports on every address)
}

func newMatcher(targets []Target, v6 bool) *matcher {
	m := &matcher{byAddr: map[netip.Addr][]rule{}}
	for _, t := range targets {
		var k *keep
		for _, f := range t.Frontends {
			if f.Addr.IsValid() && f.Addr.Unmap().Is6() != v6 {
				continue
			}
			if k == nil {
				k = newKeep(t.Keep, v6)
			}
			r := rule{first: f.First, last: f.Last, keep: k}
			if f.Addr.IsValid() {
				a := f.Addr.Unmap()
				m.byAddr[a] = append(m.byAddr[a], r)
			} else {
				m.any = append(m.any, r)
			}
		}
	}
	return m
}

func newKeep(eps []netip.AddrPort, v6 bool) *keep {
	k := &keep{anyPort: map[netip.Addr]struct{}{}, exact: map[netip.AddrPort]struct{}{}}
	for _, ep := range eps {
		a := ep.Addr().Unmap()
		if a.Is6() != v6 {
			continue
		}
		if ep.Port() == 0 {
			k.anyPort[a] = struct{}{}
		} else {
			k.exact[netip.AddrPortFrom(a, ep.Port())] = struct{}{}
		}
	}
	return k
}

func (m *matcher) empty() bool { return len(m.byAddr) == 0 && len(m.any) == 0 }

// MatchConntrackFlow implements netlink.CustomConntrackFilter: true means delete.
func (m *matcher) MatchConntrackFlow(flow *netlink.ConntrackFlow) bool {
	if flow.Forward.Protocol != unix.IPPROTO_UDP {
		return false
	}
	dst, ok := addrOf(flow.Forward.DstIP)
	if !ok {
		return false
	}
	src, ok := addrOf(flow.Reverse.SrcIP)
	if !ok {
		return false
	}
	return m.stale(dst, flow.Forward.DstPort, src, flow.Reverse.SrcPort)
}

// stale decides for one entry: sent to a frontend, and kept by none of the frontends' targets.
func (m *matcher) stale(dst netip.Addr, dport uint16, replySrc netip.Addr, replyPort uint16) bool {
	matched := false
	for _, rules := range [][]rule{m.byAddr[dst], m.any} {
		for _, r := range rules {
			if dport < r.first || dport > r.last {
				continue
			}
			if r.keep.has(replySrc, replyPort) {
				return false
			}
			matched = true
		}
	}
	return matched
}

func addrOf(ip net.IP) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(ip)
	return a.Unmap(), ok
}
