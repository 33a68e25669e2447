package nft

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/mdlayher/socket"
	"golang.org/x/sys/unix"
)

// Foreign is one change to the watched tables that another process committed, or the news that
// events were lost. A Watcher reports one per committed batch (the kernel ends each batch's
// events with NFT_MSG_NEWGEN).
type Foreign struct {
	// Tables are the watched tables the batch changed, sorted.
	Tables []Table
	// Events counts the batch's events about watched tables.
	Events int
	// Gen is the ruleset generation the batch produced; PID and Process are the committing
	// process as the kernel names it (NFTA_GEN_PROC_PID, NFTA_GEN_PROC_NAME): for the log,
	// so an operator learns who flushed the tables.
	Gen     uint32
	PID     uint32
	Process string
	// Overflow is set when the event socket dropped events (ENOBUFS): which tables changed is
	// unknown, so the caller must verify all of them.
	Overflow bool
	// Unwatched is set when another batch was committed while the Watcher was out of the event
	// group for one of our own large batches (Kernel.Apply): which tables it changed is
	// unknown, so the caller must verify all of them.
	Unwatched bool
}

// DefaultWatchBuffer is the event socket's receive buffer. The kernel queues a batch's events
// all at once when it commits, our own small batches included (they are filtered here, not by
// the kernel; our large ones are applied unwatched, see Kernel.applyUnwatched), and another
// writer's 10k-Service table queues about 20 MiB of them (TestKernelWatchMeasure); a larger
// burst overflows, which is reported as Foreign{Overflow: true}. The buffer is a limit, not an
// allocation: an idle socket holds nothing.
const DefaultWatchBuffer = 64 << 20

// Watcher reads nftables' netlink events (multicast group NFNLGRP_NFTABLES) and reports the
// changes other processes make to a few tables. Our own commits are recognised by the netlink
// port of the Kernel that sends them (the kernel stamps every event with the committing
// socket's port ID), so they cost the reader a parse and nothing else; the large ones are not
// even produced (Kernel.applyUnwatched). Changes to other tables (another writer's inet
// filter) are ignored. While nothing commits, the Watcher sleeps in recvmsg: detecting drift
// costs nothing when nothing changes.
type Watcher struct {
	s     *socket.Conn
	buf   []byte
	msgs  []nlMsg // reused by Run: its messages alias buf
	state watchState

	// Set by Kernel.applyUnwatched (another goroutine) when a batch may have gone unseen; Run
	// reports it. wake interrupts Run's recvmsg; rejoin is the error of a failed rejoin of the
	// event group, which Run retries.
	mu     sync.Mutex
	miss   bool
	rejoin error
	wake   context.CancelFunc
}

// NewWatcher subscribes to nftables events in the namespace of opts (WithNetNS) and watches
// tables. Commits sent by own (nil: none) are not reported. It needs CAP_NET_ADMIN.
func NewWatcher(tables []Table, own *Kernel, opts ...KernelOption) (*Watcher, error) {
	var cfg kernelConfig
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.watchBuffer <= 0 {
		cfg.watchBuffer = DefaultWatchBuffer
	}
	s, err := socket.Socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER, "nftables-events", &socket.Config{NetNS: cfg.netnsFD})
	if err != nil {
		return nil, fmt.Errorf("open netfilter netlink socket for events (needs CAP_NET_ADMIN in the target network namespace): %w", err)
	}
	if err := s.Bind(&unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		s.Close()
		return nil, fmt.Errorf("bind netfilter event socket: %w", err)
	}
	if err := s.SetsockoptInt(unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, unix.NFNLGRP_NFTABLES); err != nil {
		s.Close()
		return nil, fmt.Errorf("join the nftables event group: %w", err)
	}
	// Forced: the system's rmem_max (often 208 KiB) would overflow on the first large commit.
	if err := s.SetsockoptInt(unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, cfg.watchBuffer/2); err != nil {
		if err2 := s.SetsockoptInt(unix.SOL_SOCKET, unix.SO_RCVBUF, cfg.watchBuffer/2); err2 != nil {
			s.Close()
			return nil, fmt.Errorf("raise the event socket's receive buffer to %d bytes: forced: %v; plain: %w", cfg.watchBuffer, err, err2)
		}
	}
	w := &Watcher{s: s, buf: make([]byte, nlRecvSize), state: watchState{tables: map[Table]bool{}}}
	for _, t := range tables {
		w.state.tables[t] = true
	}
	if own != nil {
		w.state.own = own.conn.pid
		w.state.hasOwn = true
		own.watcher = w
	}
	return w, nil
}

// leave and join take the socket out of the event group and back in.
func (w *Watcher) leave() error {
	return w.s.SetsockoptInt(unix.SOL_NETLINK, unix.NETLINK_DROP_MEMBERSHIP, unix.NFNLGRP_NFTABLES)
}

func (w *Watcher) join() error {
	return w.s.SetsockoptInt(unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, unix.NFNLGRP_NFTABLES)
}

// missed tells Run that a batch may have gone unseen (and that rejoining the group failed, if
// joinErr is set), waking it.
func (w *Watcher) missed(joinErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.miss = true
	if joinErr != nil {
		w.rejoin = joinErr
	}
	if w.wake != nil {
		w.wake()
	}
}

// recvContext is the context of Run's next recvmsg: ctx, cancelled early by missed.
func (w *Watcher) recvContext(ctx context.Context) (context.Context, context.CancelFunc) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rctx, cancel := context.WithCancel(ctx)
	w.wake = cancel
	if w.miss {
		cancel()
	}
	return rctx, cancel
}

// takeMissed returns whether a batch may have gone unseen since the last call, rejoining the
// event group first if that had failed.
func (w *Watcher) takeMissed() (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := w.miss
	w.miss = false
	if w.rejoin != nil {
		if err := w.join(); err != nil {
			return m, fmt.Errorf("rejoin the nftables event group (first attempt: %v): %w", w.rejoin, err)
		}
		w.rejoin = nil
	}
	return m, nil
}

// Close releases the socket; a Run in progress returns.
func (w *Watcher) Close() error { return w.s.Close() }

// Run reads events until ctx ends (it returns nil then) or the socket fails, calling fn for each
// foreign change to the watched tables, for each overflow and for each batch that may have been
// committed while we applied one of ours unwatched. fn runs on Run's goroutine and
// should not block for long: events queue in the socket meanwhile.
func (w *Watcher) Run(ctx context.Context, fn func(Foreign)) error {
	for {
		rctx, cancel := w.recvContext(ctx)
		n, _, _, _, err := w.s.Recvmsg(rctx, w.buf, nil, 0)
		woken := err != nil && rctx.Err() != nil // by missed: nothing was read
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		missed, jerr := w.takeMissed()
		if missed {
			fn(Foreign{Unwatched: true})
		}
		if jerr != nil {
			return jerr
		}
		if woken {
			continue
		}
		if errors.Is(err, unix.ENOBUFS) {
			w.state.reset()
			fn(Foreign{Overflow: true})
			continue
		}
		if err != nil {
			return fmt.Errorf("read nftables events: %w", err)
		}
		msgs, err := nlParseMsgs(w.msgs[:0], w.buf[:n])
		w.msgs = msgs
		if err != nil {
			// A malformed datagram hides what it held: verify everything.
			w.state.reset()
			fn(Foreign{Overflow: true})
			continue
		}
		for _, m := range msgs {
			if f, ok := w.state.feed(m); ok {
				fn(f)
			}
		}
	}
}

// watchState groups events into batches and keeps those that touch watched tables.
type watchState struct {
	tables map[Table]bool
	own    uint32
	hasOwn bool
	// the batch being read: watched tables it touched and how many events did
	touched map[Table]bool
	events  int
	// ownEvents counts the events of our own commits read (tests; Run's goroutine writes it).
	ownEvents atomic.Int64
}

func (s *watchState) reset() { s.touched, s.events = nil, 0 }

// feed takes one event. It returns a Foreign when m ends a batch (NFT_MSG_NEWGEN) that changed a
// watched table and was not our own.
func (s *watchState) feed(m nlMsg) (Foreign, bool) {
	if m.typ>>8 != unix.NFNL_SUBSYS_NFTABLES || len(m.data) < nlNfgenLen {
		return Foreign{}, false
	}
	own := s.hasOwn && m.pid == s.own
	if own {
		s.ownEvents.Add(1)
	}
	typ := m.typ & 0xff
	if typ == unix.NFT_MSG_NEWGEN {
		defer s.reset()
		if own || s.events == 0 {
			return Foreign{}, false
		}
		a := nlAttrMap(m.data[nlNfgenLen:])
		f := Foreign{Events: s.events, Gen: nlU32(a[unix.NFTA_GEN_ID]), PID: nlU32(a[unix.NFTA_GEN_PROC_PID]),
			Process: nlStr(a[unix.NFTA_GEN_PROC_NAME])}
		for t := range s.touched {
			f.Tables = append(f.Tables, t)
		}
		sort.Slice(f.Tables, func(i, j int) bool {
			if f.Tables[i].Family != f.Tables[j].Family {
				return f.Tables[i].Family < f.Tables[j].Family
			}
			return f.Tables[i].Name < f.Tables[j].Name
		})
		return f, true
	}
	if own || !watchObjectMsg(typ) {
		return Foreign{}, false
	}
	// Every object message names its table in attribute 1 (NFTA_TABLE_NAME, NFTA_CHAIN_TABLE,
	// NFTA_RULE_TABLE, NFTA_SET_TABLE, NFTA_SET_ELEM_LIST_TABLE, NFTA_OBJ_TABLE,
	// NFTA_FLOWTABLE_TABLE).
	t := Table{Family: Family(m.data[0]), Name: nlStr(nlAttrMap(m.data[nlNfgenLen:])[1])}
	if !s.tables[t] {
		return Foreign{}, false
	}
	if s.touched == nil {
		s.touched = map[Table]bool{}
	}
	s.touched[t] = true
	s.events++
	return Foreign{}, false
}

// watchObjectMsg reports whether typ is an event about an object of a table (not a generation,
// not a trace).
func watchObjectMsg(typ uint16) bool {
	switch typ {
	case unix.NFT_MSG_NEWTABLE, unix.NFT_MSG_DELTABLE,
		unix.NFT_MSG_NEWCHAIN, unix.NFT_MSG_DELCHAIN,
		unix.NFT_MSG_NEWRULE, unix.NFT_MSG_DELRULE,
		unix.NFT_MSG_NEWSET, unix.NFT_MSG_DELSET,
		unix.NFT_MSG_NEWSETELEM, unix.NFT_MSG_DELSETELEM,
		unix.NFT_MSG_NEWOBJ, unix.NFT_MSG_DELOBJ,
		unix.NFT_MSG_NEWFLOWTABLE, unix.NFT_MSG_DELFLOWTABLE:
		return true
	}
	// `nft destroy` (kernel 6.3+) reports its deletions with their own types.
	return typ >= nftMsgDestroyTable && typ <= nftMsgDestroyFlowtable
}

// NFT_MSG_DESTROYTABLE … NFT_MSG_DESTROYFLOWTABLE (linux/netfilter/nf_tables.h), not in x/sys.
const (
	nftMsgDestroyTable     = 0x1a
	nftMsgDestroyFlowtable = 0x20
)

// Generation returns the ruleset generation of the namespace (NFT_MSG_GETGEN): a counter the
// kernel increments on every committed batch, whoever sends it and whatever table it changes.
// Tests use it to name a batch; a poller could compare it, but it cannot tell which table a
// batch changed (the Watcher can).
func (k *Kernel) Generation(ctx context.Context) (uint32, error) {
	var gen uint32
	found := false
	err := k.conn.get(ctx, unix.NFT_MSG_GETGEN, Family(unix.AF_UNSPEC), nil, func(m nlMsg) error {
		if m.typ&0xff == unix.NFT_MSG_NEWGEN && len(m.data) >= nlNfgenLen {
			gen, found = nlU32(nlAttrMap(m.data[nlNfgenLen:])[unix.NFTA_GEN_ID]), true
		}
		return nil
	})
	if err == nil && !found {
		err = errors.New("no NFT_MSG_NEWGEN in the reply")
	}
	if err != nil {
		return 0, fmt.Errorf("read the nftables generation: %w", err)
	}
	return gen, nil
}
