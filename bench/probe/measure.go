package probe

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Latencies are connect round trips; Failed counts connects that did not complete.
type Latencies struct {
	Samples []time.Duration
	Failed  int
}

// Connect opens n TCP connections from the client, the i-th to targets[i%len(targets)], one at a
// time, and times each connect(2): from the SYN leaving to the SYN-ACK arriving, which includes
// the node's conntrack and NAT work for a connection's first packet. Each connection is then
// reset (SO_LINGER 0) so no TIME_WAIT piles up. Blocking syscalls on a thread in the client
// namespace: no Go scheduler or poller between the two timestamps.
func (t *Topology) Connect(targets []netip.AddrPort, n int, timeout time.Duration) (Latencies, error) {
	var out Latencies
	if len(targets) == 0 {
		return out, fmt.Errorf("first-packet probe: no target to connect to (a workload with at least one ClusterIP Service is needed)")
	}
	err := t.Client.Do(func() error {
		for i := 0; i < n; i++ {
			d, err := connectOnce(targets[i%len(targets)], timeout, 0, nil)
			if err != nil {
				out.Failed++
				continue
			}
			out.Samples = append(out.Samples, d)
		}
		return nil
	})
	return out, err
}

// connectOnce connects to ap within timeout and, when reply is not nil, reads the server's line
// into it within replyTimeout (0: timeout).
func connectOnce(ap netip.AddrPort, timeout, replyTimeout time.Duration, reply *string) (time.Duration, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if replyTimeout == 0 {
		replyTimeout = timeout
	}
	tv, rtv := unix.NsecToTimeval(timeout.Nanoseconds()), unix.NsecToTimeval(replyTimeout.Nanoseconds())
	// SO_SNDTIMEO bounds a blocking connect, SO_RCVTIMEO the read.
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &rtv)
	_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	sa := &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}
	start := time.Now()
	if err := unix.Connect(fd, sa); err != nil {
		return 0, err
	}
	d := time.Since(start)
	if reply != nil {
		buf := make([]byte, 128)
		n, err := unix.Read(fd, buf)
		if err != nil {
			return d, err
		}
		*reply = trimLine(string(buf[:max(n, 0)]))
	}
	return d, nil
}

const (
	// waitReplyTimeout bounds the connect of one of WaitReply's connections. A SYN sent before
	// the proxy has programmed the address gets no answer; the attempt then waits this long
	// before the next one, so it is the resolution of every API→packet figure: 20 ms put up to
	// 20 ms into a new Service's. A handshake is the kernel's alone (no server process runs in
	// it) and takes well under 1 ms here (first-packet p99 ≤ 0.25 ms in bench/REPORT.md); the
	// kernel rounds the timeout to whole ticks (one at HZ=250), so an attempt may also give up
	// early and is then simply retried.
	waitReplyTimeout = 4 * time.Millisecond
	// waitReplyRead bounds the read of the server's answer once connected: the connection has
	// reached a server, so waiting longer costs no resolution, and a loaded machine (race-mode
	// tests) does not turn slow answers into failed attempts.
	waitReplyRead = 250 * time.Millisecond
)

// WaitReply polls target from the client (a new connection every millisecond) until the server
// that answers says want (the endpoint address the connection reached; "" accepts any answer),
// and returns the time from since to that answer. It gives up after limit.
func (t *Topology) WaitReply(target netip.AddrPort, want string, since time.Time, limit time.Duration) (time.Duration, error) {
	var got time.Duration
	err := t.Client.Do(func() error {
		deadline := since.Add(limit)
		last := ""
		for time.Now().Before(deadline) {
			var reply string
			_, err := connectOnce(target, waitReplyTimeout, waitReplyRead, &reply)
			if err == nil && (want == "" || reply == want) {
				got = time.Since(since)
				return nil
			}
			if err != nil {
				last = err.Error()
			} else {
				last = "reached " + reply
			}
			time.Sleep(time.Millisecond)
		}
		if want == "" {
			return fmt.Errorf("%s: no answer within %s (last: %s)", target, limit, last)
		}
		return fmt.Errorf("%s: no answer from %s within %s (last: %s)", target, want, limit, last)
	})
	return got, err
}

// Percentile returns the p-th percentile (0-100) of xs (nearest rank).
func Percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), xs...)
	sortDurations(s)
	i := int(p/100*float64(len(s))+0.5) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(s) {
		i = len(s) - 1
	}
	return s[i]
}

func sortDurations(s []time.Duration) { slices.Sort(s) }

// String summarises l for logs.
func (l Latencies) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "n=%d failed=%d p50=%v p90=%v p99=%v", len(l.Samples), l.Failed,
		Percentile(l.Samples, 50), Percentile(l.Samples, 90), Percentile(l.Samples, 99))
	return b.String()
}
