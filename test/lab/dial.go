package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// Outcome classifies what happened to one probe, so a test can assert "refused" (the service has
// no endpoints) apart from "timeout" (the packet was dropped).
type Outcome int

const (
	// Replied means a backend answered with a valid Reply.
	Replied Outcome = iota
	// Refused means a TCP reset or an ICMP port unreachable (ECONNREFUSED).
	Refused
	// Timeout means nothing came back in time: the packet or its answer was dropped.
	Timeout
	// Unreachable means an ICMP host/net unreachable or prohibited came back, or the local stack
	// refused to send (no route, or an output filter dropped the packet).
	Unreachable
	// Failed is anything else, including an answer that is not a Reply; see Result.Err.
	Failed
)

// String names the outcome as tests print it.
func (o Outcome) String() string {
	switch o {
	case Replied:
		return "replied"
	case Refused:
		return "refused"
	case Timeout:
		return "timeout"
	case Unreachable:
		return "unreachable"
	}
	return "failed"
}

// Result is the outcome of one probe; Reply is set only when Outcome is Replied.
type Result struct {
	Outcome Outcome
	Reply   Reply
	Err     error
}

// String is a one-line form for test failure messages.
func (r Result) String() string {
	if r.Outcome == Replied {
		return "replied: " + r.Reply.String()
	}
	if r.Err != nil {
		return fmt.Sprintf("%s: %v", r.Outcome, r.Err)
	}
	return r.Outcome.String()
}

// Dialer probes backends from inside a namespace. The zero value is ready to use.
type Dialer struct {
	// Timeout bounds one probe (connect and answer); default 2 s. Keep it at 2 s or more when a
	// TCP probe must tell an ICMP error from a drop: in a one-kernel lab the ICMP answer to the
	// first SYN arrives while connect still holds the socket locked, and the kernel discards it
	// (TcpExtLockDroppedIcmps); the answer to the retransmitted SYN, 1 s later, counts.
	Timeout time.Duration
	// UDPAttempts is how many datagrams a UDP probe sends, spread over Timeout; default 4.
	UDPAttempts int
	// Source, if valid, is the local address to send from (it must exist in the namespace).
	Source netip.Addr
	// SourcePort, if nonzero, is the local port to send from, so a caller can make every probe
	// a new conntrack flow (the kernel's random ephemeral port may repeat a recent one, whose
	// entry still holds the earlier probe's DNAT).
	SourcePort uint16
	// Parallel bounds concurrent probes in Spread; default 8.
	Parallel int
}

const (
	defaultTimeout  = 2 * time.Second
	defaultAttempts = 4
	defaultParallel = 8
)

// Dial probes network ("tcp" or "udp") address addr ("ip:port", "[ip6]:port") from ns with the
// default Dialer.
func Dial(ctx context.Context, ns *netns.NS, network, addr string) Result {
	return Dialer{}.Dial(ctx, ns, network, addr)
}

// Dial probes addr once from ns: one TCP connection, or one UDP socket that sends up to
// UDPAttempts datagrams until an answer or an error comes back.
func (d Dialer) Dial(ctx context.Context, ns *netns.NS, network, addr string) Result {
	f := d.Flow(ns, network, addr)
	defer f.Close()
	return f.Probe(ctx)
}

func parsed(line string, ap netip.AddrPort) Result {
	r, err := ParseReply(line)
	if err != nil {
		return Result{Outcome: Failed, Err: fmt.Errorf("%s: %w", ap, err)}
	}
	return Result{Outcome: Replied, Reply: r}
}

// classify maps an error to an Outcome by its errno, never by its text.
func classify(ctx context.Context, err error) Result {
	var out Outcome
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		out = Refused
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		out = Unreachable
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, syscall.ETIMEDOUT), ctx.Err() != nil:
		out = Timeout
	default:
		out = Failed
	}
	return Result{Outcome: out, Err: err}
}

// Tally counts who answered a series of probes.
type Tally struct {
	// Pods counts replies by backend name.
	Pods map[string]int
	// Outcomes counts every probe by outcome (Replied included).
	Outcomes map[Outcome]int
	// Errors keeps the first few failures, for the test log.
	Errors []error
}

// maxTallyErrors bounds Tally.Errors so a fully broken service does not flood the log.
const maxTallyErrors = 5

// String is a stable one-line summary, e.g. "pod-1=12 pod-2=8 timeout=1".
func (t Tally) String() string {
	var parts []string
	for pod, n := range t.Pods {
		parts = append(parts, fmt.Sprintf("%s=%d", pod, n))
	}
	for o, n := range t.Outcomes {
		if o != Replied {
			parts = append(parts, fmt.Sprintf("%s=%d", o, n))
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// Spread probes addr n times from ns with the default Dialer; see Dialer.Spread.
func Spread(ctx context.Context, ns *netns.NS, network, addr string, n int) Tally {
	return Dialer{}.Spread(ctx, ns, network, addr, n)
}

// Spread probes addr n times from ns, each probe from a new socket (a new source port, so a new
// conntrack entry and a new load-balancing decision), at most Parallel at a time, and counts
// which backends answered.
func (d Dialer) Spread(ctx context.Context, ns *netns.NS, network, addr string, n int) Tally {
	par := d.Parallel
	if par <= 0 {
		par = defaultParallel
	}
	t := Tally{Pods: map[string]int{}, Outcomes: map[Outcome]int{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, par)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			r := d.Dial(ctx, ns, network, addr)
			mu.Lock()
			defer mu.Unlock()
			t.Outcomes[r.Outcome]++
			if r.Outcome == Replied {
				t.Pods[r.Reply.Pod]++
			} else if len(t.Errors) < maxTallyErrors {
				t.Errors = append(t.Errors, r.Err)
			}
		}()
	}
	wg.Wait()
	return t
}
