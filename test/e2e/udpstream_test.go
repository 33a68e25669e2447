package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

// udpStream is a client that keeps sending, statsd-style: one UDP socket (one 5-tuple, so one
// conntrack entry for as long as it keeps the entry alive) sending a datagram every
// streamInterval, and counting what comes back: replies by the pod that sent them, and ICMP
// errors (the Service refused it). Tests assert on counts, never on how long something took.
type udpStream struct {
	c    *net.UDPConn
	dst  netip.AddrPort
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	sent    int
	replies map[string]int
	refused int
	other   []error // first few unexpected errors, for failure messages
}

const streamInterval = 10 * time.Millisecond

// startStream opens the socket in ns and starts sending to dst; it stops when the test ends.
func startStream(t *testing.T, ns *netns.NS, dst netip.AddrPort) *udpStream {
	t.Helper()
	network := "udp4"
	if dst.Addr().Is6() {
		network = "udp6"
	}
	s := &udpStream{dst: dst, stop: make(chan struct{}), replies: map[string]int{}}
	err := ns.Do(func() (err error) {
		s.c, err = net.DialUDP(network, nil, net.UDPAddrFromAddrPort(dst))
		return err
	})
	if err != nil {
		t.Fatalf("stream to %s: %v", dst, err)
	}
	s.wg.Add(2)
	go s.send()
	go s.receive()
	t.Cleanup(s.close)
	return s
}

func (s *udpStream) send() {
	defer s.wg.Done()
	tick := time.NewTicker(streamInterval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		_, err := s.c.Write([]byte("stat\n"))
		s.mu.Lock()
		s.sent++
		s.noteErr(err)
		s.mu.Unlock()
	}
}

func (s *udpStream) receive() {
	defer s.wg.Done()
	buf := make([]byte, 2048)
	for {
		n, err := s.c.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		s.mu.Lock()
		if err == nil {
			if r, perr := lab.ParseReply(strings.TrimSpace(string(buf[:n]))); perr == nil {
				s.replies[r.Pod]++
			} else {
				s.noteErr(perr)
			}
		} else {
			s.noteErr(err)
		}
		s.mu.Unlock()
	}
}

// noteErr counts an ICMP port unreachable (reported on the socket's next call) as a refusal.
// Called with mu held.
func (s *udpStream) noteErr(err error) {
	switch {
	case err == nil:
	case errors.Is(err, syscall.ECONNREFUSED):
		s.refused++
	case len(s.other) < 3:
		s.other = append(s.other, err)
	}
}

func (s *udpStream) close() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	s.c.Close()
	s.wg.Wait()
}

// local is the stream's source address and port (its conntrack entry's --sport).
func (s *udpStream) local() netip.AddrPort {
	return s.c.LocalAddr().(*net.UDPAddr).AddrPort()
}

// counts returns what came back so far.
func (s *udpStream) counts() (replies map[string]int, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.replies))
	for k, v := range s.replies {
		out[k] = v
	}
	return out, s.refused
}

func (s *udpStream) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("stream %s -> %s: sent %d, replies %v, refused %d, other errors %v",
		s.c.LocalAddr(), s.dst, s.sent, s.replies, s.refused, s.other)
}

// streamWait bounds how long a stream may take to show a change the daemon made. Generous: the
// assertion is on packets counted, and a busy machine must not fail it.
const streamWait = 30 * time.Second

// awaitReplies waits until pod has answered n more datagrams of s than it had in before.
func awaitReplies(t *testing.T, e *env, s *udpStream, what, pod string, before map[string]int, n int) {
	t.Helper()
	tier.Until(t, e.ctx, streamWait, pollInterval, what, func() (bool, string) {
		got, _ := s.counts()
		return got[pod]-before[pod] >= n, s.String()
	})
}

// awaitRefusals waits until n more datagrams of s were refused than refusedBefore.
func awaitRefusals(t *testing.T, e *env, s *udpStream, what string, refusedBefore, n int) {
	t.Helper()
	tier.Until(t, e.ctx, streamWait, pollInterval, what, func() (bool, string) {
		_, refused := s.counts()
		return refused-refusedBefore >= n, s.String()
	})
}

// entryFilter is conntrack's filter for the node's UDP entry of the flow from src to dst.
func entryFilter(src, dst netip.AddrPort) []string {
	args := []string{"-p", "udp", "--orig-src", src.Addr().String(), "--sport", fmt.Sprint(src.Port()),
		"--orig-dst", dst.Addr().String(), "--dport", fmt.Sprint(dst.Port())}
	if dst.Addr().Is6() {
		args = append([]string{"-f", "ipv6"}, args...)
	}
	return args
}

// conntrackEntries lists the node's UDP conntrack entries of the flow from src to dst, one line
// each.
func conntrackEntries(t *testing.T, e *env, src, dst netip.AddrPort) []string {
	t.Helper()
	out, err := e.lab.Conntrack(entryFilter(src, dst)...)
	if err != nil {
		t.Fatalf("conntrack -L %v: %v\n%s", entryFilter(src, dst), err, out)
	}
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "udp") {
			lines = append(lines, l)
		}
	}
	return lines
}

// markEntry sets the conntrack mark of the flow's entry. nftproxy sets no conntrack marks, so an
// entry carrying it after a daemon restart is the entry from before, not a new one for the same
// 5-tuple (entry ids cannot tell: the kernel may give a new entry of the same tuple the old id).
func markEntry(t *testing.T, e *env, src, dst netip.AddrPort, mark int) {
	t.Helper()
	args := append([]string{"conntrack", "-U"}, entryFilter(src, dst)...)
	args = append(args, "--mark", fmt.Sprint(mark))
	if out, err := e.lab.Node.Run(args...); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}
