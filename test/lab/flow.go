package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// Flow is one connection (TCP) or one socket (UDP) from a namespace to an address, probed as
// often as a test likes. Every probe of a flow has the same 5-tuple, so it follows the same
// conntrack entry: that is how a test proves an established connection survives a ruleset
// change, or that a stale UDP conntrack entry was (or was not) deleted.
type Flow struct {
	d       Dialer
	ns      *netns.NS
	network string
	addr    string

	mu     sync.Mutex
	ap     netip.AddrPort
	c      net.Conn
	r      *bufio.Reader
	broken error // a TCP connection that failed once stays failed
}

// queuedErrorWait bounds the wait for an ICMP error after a locally rejected send.
const queuedErrorWait = 200 * time.Millisecond

// NewFlow returns a flow to addr from ns with the default Dialer; see Dialer.Flow.
func NewFlow(ns *netns.NS, network, addr string) *Flow { return Dialer{}.Flow(ns, network, addr) }

// Flow prepares a flow; nothing is sent until the first Probe. network is "tcp" or "udp",
// addr "ip:port" or "[ip6]:port". Close releases the socket.
func (d Dialer) Flow(ns *netns.NS, network, addr string) *Flow {
	return &Flow{d: d, ns: ns, network: network, addr: addr}
}

// Probe asks the backend behind the flow who it is. The first TCP probe connects and reads the
// greeting; later ones send a line on the same connection. A UDP probe sends up to UDPAttempts
// datagrams from the same socket until an answer or an ICMP error comes back. Each probe is
// bounded by the Dialer's Timeout.
func (f *Flow) Probe(ctx context.Context) Result {
	f.mu.Lock()
	defer f.mu.Unlock()
	timeout := f.d.Timeout
	if timeout <= 0 {
		timeout = defaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if f.broken != nil {
		return Result{Outcome: Failed, Err: fmt.Errorf("%s: connection already failed: %w", f, f.broken)}
	}
	if f.c == nil {
		if r, ok := f.open(ctx); !ok {
			return r
		}
		if f.network == "tcp" {
			return f.readTCP(ctx)
		}
	}
	if f.network == "tcp" {
		// The connection still holds the previous probe's deadline, long past after an idle
		// spell: this probe gets its own before it sends.
		if dl, ok := ctx.Deadline(); ok {
			_ = f.c.SetDeadline(dl)
		}
		if _, err := f.c.Write([]byte("probe\n")); err != nil {
			f.broken = err
			return classify(ctx, fmt.Errorf("%s: send: %w", f, err))
		}
		return f.readTCP(ctx)
	}
	return f.probeUDP(ctx)
}

// open creates the socket inside the namespace; for TCP that is the connect.
func (f *Flow) open(ctx context.Context) (Result, bool) {
	ap, err := netip.ParseAddrPort(f.addr)
	if err != nil {
		f.broken = err
		return Result{Outcome: Failed, Err: fmt.Errorf("%s: %w", f, err)}, false
	}
	if f.network != "tcp" && f.network != "udp" {
		f.broken = fmt.Errorf("network %q, want tcp or udp", f.network)
		return Result{Outcome: Failed, Err: fmt.Errorf("%s: %w", f, f.broken)}, false
	}
	f.ap = ap
	nd := &net.Dialer{}
	if f.d.Source.IsValid() || f.d.SourcePort != 0 {
		var ip net.IP
		if f.d.Source.IsValid() {
			ip = f.d.Source.AsSlice()
		}
		if f.network == "udp" {
			nd.LocalAddr = &net.UDPAddr{IP: ip, Port: int(f.d.SourcePort)}
		} else {
			nd.LocalAddr = &net.TCPAddr{IP: ip, Port: int(f.d.SourcePort)}
		}
	}
	var c net.Conn
	err = f.ns.Do(func() (err error) {
		c, err = nd.DialContext(ctx, family(f.network, ap.Addr()), ap.String())
		return err
	})
	if err != nil {
		if f.network == "tcp" {
			f.broken = err
		}
		return classify(ctx, fmt.Errorf("%s: %w", f, err)), false
	}
	f.c, f.r = c, bufio.NewReader(c)
	return Result{}, true
}

func (f *Flow) readTCP(ctx context.Context) Result {
	if dl, ok := ctx.Deadline(); ok {
		_ = f.c.SetDeadline(dl)
	}
	line, err := f.r.ReadString('\n')
	if err != nil {
		f.broken = err
		return classify(ctx, fmt.Errorf("%s: read: %w", f, err))
	}
	return parsed(line, f.ap)
}

func (f *Flow) probeUDP(ctx context.Context) Result {
	attempts := f.d.UDPAttempts
	if attempts <= 0 {
		attempts = defaultAttempts
	}
	dl, _ := ctx.Deadline()
	step := time.Until(dl) / time.Duration(attempts)
	buf := make([]byte, 2048)
	var last error
	for i := 0; i < attempts; i++ {
		if _, err := f.c.Write([]byte("probe\n")); err != nil {
			if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
				err = f.queuedError(ctx, err)
			}
			return classify(ctx, fmt.Errorf("%s: send %d: %w", f, i+1, err))
		}
		wait := time.Now().Add(step)
		if i == attempts-1 || wait.After(dl) {
			wait = dl
		}
		_ = f.c.SetReadDeadline(wait)
		n, err := f.c.Read(buf)
		if err == nil {
			return parsed(string(buf[:n]), f.ap)
		}
		last = fmt.Errorf("%s: %d datagrams unanswered: %w", f, i+1, err)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			break // an ICMP error: another datagram would get the same answer
		}
	}
	return classify(ctx, last)
}

// queuedError looks for the ICMP answer to a datagram the node's own output hook rejected: the
// send fails with EPERM (the datagram was dropped) and the ICMP error the reject generated is
// queued on the socket a moment later. That error (refused, unreachable) says more than EPERM.
func (f *Flow) queuedError(ctx context.Context, sendErr error) error {
	wait := time.Now().Add(queuedErrorWait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(wait) {
		wait = dl
	}
	_ = f.c.SetReadDeadline(wait)
	var buf [64]byte
	if _, err := f.c.Read(buf[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return sendErr
}

// Local is the flow's source address and port once the first probe opened it (zero before),
// e.g. to filter conntrack entries with --orig-port-src.
func (f *Flow) Local() netip.AddrPort {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c == nil {
		return netip.AddrPort{}
	}
	return addrPort(f.c.LocalAddr())
}

// String names the flow for error messages: "udp 198.19.0.1:53 from <namespace>".
func (f *Flow) String() string {
	return fmt.Sprintf("%s %s from %s", f.network, f.addr, f.ns.Name)
}

// Close releases the flow's socket; for TCP the backend sees the connection end.
func (f *Flow) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.c != nil {
		f.c.Close()
	}
	if f.broken == nil {
		f.broken = net.ErrClosed
	}
}
