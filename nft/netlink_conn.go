package nft

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/mdlayher/socket"
	"golang.org/x/sys/unix"
)

// nlConn is one NETLINK_NETFILTER socket, kept open for the life of a Kernel.
type nlConn struct {
	s       *socket.Conn
	pid     uint32
	sndBuf  int // current SO_SNDBUF, as the kernel reports it
	rcvBuf  int
	seq     uint32
	recvBuf []byte
	msgs    []nlMsg // reused by recv: its messages alias recvBuf
	// abandoned is the sequence number of a dump whose reader stopped before its end (an
	// error in the reply or its decoding, a cancelled context), 0 if none. The kernel produces
	// a dump's next reply as the socket is read and refuses another dump (EBUSY) until it has
	// sent the last, so the next request reads the rest of it first (finish).
	abandoned uint32
}

const (
	nlMinRcvBuf = 4 << 20 // room for every error reply of a batch of ~4k messages
	nlMaxBuf    = 1 << 30 // upper bound for forced socket buffers
	// nlRecvSize is the buffer of one recvmsg. A datagram is one kernel skb: a dump fills
	// skbs of at most 32 KiB (the kernel caps netlink's dump allocation there, whatever the
	// reader's buffer), error replies are capped, so it is never exceeded; a datagram that did
	// would be reported as truncated, never parsed.
	nlRecvSize = 256 << 10
)

func nlDial(netnsFD int) (*nlConn, error) {
	s, err := socket.Socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_NETFILTER, "nftables", &socket.Config{NetNS: netnsFD})
	if err != nil {
		return nil, fmt.Errorf("open netfilter netlink socket (needs CAP_NET_ADMIN in the target network namespace): %w", err)
	}
	if err := s.Bind(&unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		s.Close()
		return nil, fmt.Errorf("bind netfilter netlink socket: %w", err)
	}
	sa, err := s.Getsockname()
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("netfilter netlink socket name: %w", err)
	}
	c := &nlConn{s: s, pid: sa.(*unix.SockaddrNetlink).Pid, recvBuf: make([]byte, nlRecvSize)}
	// Extended ACK: error replies carry the kernel's message and the offset of the failing
	// attribute. Capped ACK: error replies do not echo the request, so they stay small.
	for _, o := range []int{unix.NETLINK_EXT_ACK, unix.NETLINK_CAP_ACK} {
		if err := s.SetsockoptInt(unix.SOL_NETLINK, o, 1); err != nil {
			s.Close()
			return nil, fmt.Errorf("enable netlink socket option %d (kernel too old?): %w", o, err)
		}
	}
	c.sndBuf, _ = s.GetsockoptInt(unix.SOL_SOCKET, unix.SO_SNDBUF)
	c.rcvBuf, _ = s.GetsockoptInt(unix.SOL_SOCKET, unix.SO_RCVBUF)
	if err := c.growRcv(nlMinRcvBuf); err != nil {
		s.Close()
		return nil, err
	}
	return c, nil
}

func (c *nlConn) close() error { return c.s.Close() }

// growBuf raises a socket buffer to at least n bytes. SO_*BUFFORCE (CAP_NET_ADMIN) ignores the
// system's wmem_max/rmem_max; without the capability the plain option is tried, which the kernel
// caps at those limits, and the caller learns the size actually granted.
func (c *nlConn) growBuf(force, plain, get int, n int) (int, error) {
	if n > nlMaxBuf {
		n = nlMaxBuf
	}
	// The kernel doubles the value for bookkeeping overhead; ask for half.
	if err := c.s.SetsockoptInt(unix.SOL_SOCKET, force, n/2+1); err != nil {
		if err2 := c.s.SetsockoptInt(unix.SOL_SOCKET, plain, n/2+1); err2 != nil {
			return 0, fmt.Errorf("raise netlink socket buffer to %d bytes: forced: %v; plain: %w", n, err, err2)
		}
	}
	return c.s.GetsockoptInt(unix.SOL_SOCKET, get)
}

func (c *nlConn) growRcv(n int) error {
	if c.rcvBuf >= n {
		return nil
	}
	got, err := c.growBuf(unix.SO_RCVBUFFORCE, unix.SO_RCVBUF, unix.SO_RCVBUF, n)
	if err != nil {
		return err
	}
	c.rcvBuf = got
	return nil
}

// growSnd makes the send buffer hold a whole batch of n bytes: a netlink batch must arrive in one
// sendmsg to be one kernel transaction, and sendmsg fails with EMSGSIZE if it does not fit.
func (c *nlConn) growSnd(n int) error {
	need := n + 64<<10
	if c.sndBuf >= need {
		return nil
	}
	got, err := c.growBuf(unix.SO_SNDBUFFORCE, unix.SO_SNDBUF, unix.SO_SNDBUF, need)
	if err != nil {
		return err
	}
	c.sndBuf = got
	switch {
	case got-32 >= n: // netlink refuses a datagram longer than the send buffer less 32 bytes (EMSGSIZE)
		return nil
	case need > nlMaxBuf:
		return fmt.Errorf("%w: %d bytes, over the %d a netlink socket's send buffer may take (%d granted): send fewer changes at once",
			ErrBatchTooLarge, n, nlMaxBuf, got)
	}
	return fmt.Errorf("%w: %d bytes, over the %d bytes of send buffer granted: run with CAP_NET_ADMIN or raise net.core.wmem_max",
		ErrBatchTooLarge, n, got)
}

// nextSeq reserves n sequence numbers and returns the first.
func (c *nlConn) nextSeq(n int) uint32 {
	if c.seq > 1<<31 {
		c.seq = 0
	}
	first := c.seq + 1
	c.seq += uint32(n)
	return first
}

// send writes one datagram. A read or write cancelled by its context is stopped with a deadline in the past, which the
// socket package clears after the call, but not when the cancellation comes just as the call
// returns: the deadline then stays, and every later call on the socket fails with "i/o
// timeout" (a read-back cancelled once then failed every request, and would fail every Apply).
// So send and recv clear their deadline first. (No syscall: the deadline is the
// Go runtime's.)
func (c *nlConn) send(ctx context.Context, b []byte) error {
	if err := c.s.SetWriteDeadline(time.Time{}); err != nil {
		return fmt.Errorf("clear netlink write deadline: %w", err)
	}
	n, err := c.s.Sendmsg(ctx, b, nil, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}, 0)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("short netlink send: %d of %d bytes", n, len(b))
	}
	return nil
}

// nlMsg is one received netlink message. Its data aliases the receive buffer: it is valid until
// the next read, so whoever keeps bytes of it copies them (nlStr does).
type nlMsg struct {
	typ   uint16
	flags uint16
	seq   uint32
	pid   uint32 // the sender's port ID; in an event, the port of the socket that committed
	data  []byte // after the 16-byte header
}

// nlParseMsgs splits one datagram into its messages, appended to out (reused by the caller),
// without copying them: a large set's dump would otherwise be copied twice (bench/README.md,
// "Sizes the code's layout rests on").
func nlParseMsgs(out []nlMsg, b []byte) ([]nlMsg, error) {
	for len(b) >= nlMsgHdrLen {
		n := int(binary.NativeEndian.Uint32(b[0:4]))
		if n < nlMsgHdrLen || n > len(b) {
			return out, fmt.Errorf("malformed netlink reply: message length %d with %d bytes left", n, len(b))
		}
		out = append(out, nlMsg{
			typ:   binary.NativeEndian.Uint16(b[4:6]),
			flags: binary.NativeEndian.Uint16(b[6:8]),
			seq:   binary.NativeEndian.Uint32(b[8:12]),
			pid:   binary.NativeEndian.Uint32(b[12:16]),
			data:  b[nlMsgHdrLen:n:n],
		})
		a := nlAlign(n)
		if a > len(b) {
			a = len(b)
		}
		b = b[a:]
	}
	return out, nil
}

// recv reads one datagram. With block false it returns (nil, nil) when nothing is queued. The
// messages returned (and their data) are valid until the next recv.
func (c *nlConn) recv(ctx context.Context, block bool) ([]nlMsg, error) {
	var n int
	var err error
	trunc := false
	if err := c.s.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("clear netlink read deadline: %w", err)
	}
	if block {
		var rflags int
		n, _, rflags, _, err = c.s.Recvmsg(ctx, c.recvBuf, nil, 0)
		trunc = rflags&unix.MSG_TRUNC != 0
	} else {
		var rc syscall.RawConn
		if rc, err = c.s.SyscallConn(); err == nil {
			cerr := rc.Read(func(fd uintptr) bool {
				// MSG_TRUNC: the datagram's real length, so a truncation is seen.
				n, _, err = unix.Recvfrom(int(fd), c.recvBuf, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
				return true
			})
			if cerr != nil {
				err = cerr
			}
		}
		if errors.Is(err, unix.EAGAIN) {
			return nil, nil
		}
		trunc = n > len(c.recvBuf)
	}
	if err != nil {
		return nil, err
	}
	if trunc {
		return nil, fmt.Errorf("netlink reply larger than the %d-byte receive buffer: truncated", len(c.recvBuf))
	}
	c.msgs, err = nlParseMsgs(c.msgs[:0], c.recvBuf[:n])
	if c.msgs == nil {
		c.msgs = []nlMsg{} // nil means "nothing queued"
	}
	return c.msgs, err
}

// nlErrReply is a decoded NLMSG_ERROR.
type nlErrReply struct {
	errno  syscall.Errno // 0 for an ACK
	seq    uint32        // sequence number of the request it answers
	msg    string        // NLMSGERR_ATTR_MSG
	offset int           // NLMSGERR_ATTR_OFFS, -1 if absent
}

func nlParseError(m nlMsg) (nlErrReply, error) {
	if len(m.data) < 4+nlMsgHdrLen {
		return nlErrReply{}, fmt.Errorf("short netlink error message (%d bytes)", len(m.data))
	}
	code := int32(binary.NativeEndian.Uint32(m.data[0:4]))
	r := nlErrReply{errno: syscall.Errno(-code), seq: binary.NativeEndian.Uint32(m.data[4+8 : 4+12]), offset: -1}
	if m.flags&unix.NLM_F_ACK_TLVS == 0 {
		return r, nil
	}
	tlv := 4 + nlMsgHdrLen
	if m.flags&unix.NLM_F_CAPPED == 0 {
		tlv = 4 + nlAlign(int(binary.NativeEndian.Uint32(m.data[4:8])))
	}
	if tlv > len(m.data) {
		return r, nil
	}
	for _, a := range nlParseAttrs(m.data[tlv:]) {
		switch a.typ {
		case unix.NLMSGERR_ATTR_MSG:
			r.msg = nlStr(a.data)
		case unix.NLMSGERR_ATTR_OFFS:
			if len(a.data) >= 4 {
				r.offset = int(binary.NativeEndian.Uint32(a.data))
			}
		}
	}
	return r, nil
}

// dump sends one NLM_F_DUMP request and calls fn for every reply message until NLMSG_DONE. The
// message fn gets is valid only during the call (it aliases the receive buffer), and fn must
// not use the connection: the next read overwrites the messages still being walked.
func (c *nlConn) dump(ctx context.Context, typ uint16, fam Family, attrs func(w *nlBuf), fn func(m nlMsg) error) error {
	var w nlBuf
	seq := c.nextSeq(1)
	off := w.beginMsg(codecMsgTypeNFT|typ, unix.NLM_F_REQUEST|unix.NLM_F_DUMP|unix.NLM_F_ACK, seq, uint8(fam), 0)
	if attrs != nil {
		attrs(&w)
	}
	w.endMsg(off)
	return c.request(ctx, w.b, seq, fn)
}

// get sends one plain request (no dump) and calls fn for its reply.
func (c *nlConn) get(ctx context.Context, typ uint16, fam Family, attrs func(w *nlBuf), fn func(m nlMsg) error) error {
	var w nlBuf
	seq := c.nextSeq(1)
	off := w.beginMsg(codecMsgTypeNFT|typ, unix.NLM_F_REQUEST|unix.NLM_F_ACK, seq, uint8(fam), 0)
	if attrs != nil {
		attrs(&w)
	}
	w.endMsg(off)
	return c.request(ctx, w.b, seq, fn)
}

func (c *nlConn) request(ctx context.Context, req []byte, seq uint32, fn func(m nlMsg) error) error {
	if err := c.finish(ctx); err != nil {
		return err
	}
	if err := c.send(ctx, req); err != nil {
		return fmt.Errorf("send netlink request: %w", err)
	}
	done, err := c.replies(ctx, seq, fn)
	if !done {
		c.abandoned = seq
	}
	return err
}

// finish reads the rest of an abandoned dump (see nlConn.abandoned) and drops it. The kernel
// queues a dump's first reply inside the sendmsg of its request and each next one inside the
// recvmsg that takes the one before, so until the last reply is read the queue is never empty:
// reading without blocking until it is reads all of it. (Apply's drain may have read it
// already: then the queue is empty at once.)
func (c *nlConn) finish(ctx context.Context) error {
	if c.abandoned == 0 {
		return nil
	}
	for {
		msgs, err := c.recv(ctx, false)
		if err != nil {
			return fmt.Errorf("read the rest of an abandoned netlink dump: %w", err)
		}
		if msgs == nil {
			c.abandoned = 0
			return nil
		}
	}
}

// replies reads the replies to request seq and calls fn for each until NLMSG_DONE or the
// kernel's error or ACK; done reports whether the kernel sent its last reply (an error of fn or
// of the read leaves the rest unread).
func (c *nlConn) replies(ctx context.Context, seq uint32, fn func(m nlMsg) error) (done bool, err error) {
	for {
		msgs, err := c.recv(ctx, true)
		if err != nil {
			return false, fmt.Errorf("receive netlink reply: %w", err)
		}
		for _, m := range msgs {
			if m.seq != seq {
				continue // a late reply to an earlier, abandoned request
			}
			switch m.typ {
			case unix.NLMSG_DONE:
				return true, nil
			case unix.NLMSG_ERROR:
				e, err := nlParseError(m)
				if err != nil {
					return true, err
				}
				if e.errno != 0 {
					if e.msg != "" {
						return true, fmt.Errorf("%w (%s)", e.errno, e.msg)
					}
					return true, e.errno
				}
				return true, nil // ACK of a non-dump request
			default:
				if err := fn(m); err != nil {
					return false, err
				}
			}
		}
	}
}
