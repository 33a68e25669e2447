package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

// probeDialer makes every probe count: a TCP probe gives up before the SYN would be sent again
// (the first retransmission is 1 s later), a UDP probe sends one datagram. A lost packet is a
// failed probe, not a retry that hides a blackout.
var probeDialer = lab.Dialer{Timeout: 900 * time.Millisecond, UDPAttempts: 1}

// target is one service address the traffic keeps probing.
type target struct {
	name    string
	network string // tcp or udp
	addr    netip.Addr
	// first..last are the ports probed (one chosen at random each time); the reply must come
	// from one of pods and show the port the packet arrived on after DNAT (want(port)).
	first, last uint16
	pods        []string
	want        func(port uint16) uint16
}

// failure is one failed probe, with when it happened relative to the start of the traffic.
type failure struct {
	at     time.Duration
	target string
	result string
}

// tally is what a traffic run saw.
type tally struct {
	mu        sync.Mutex
	attempted map[string]int
	failed    map[string]int
	failures  []failure // the first maxFailures, for the log
}

const maxFailures = 20

func (t *tally) total() (attempted, failed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range t.attempted {
		attempted += n
	}
	for _, n := range t.failed {
		failed += n
	}
	return
}

// String is one line per target: "tcp clusterIP: 100 attempted, 0 failed".
func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var names []string
	for n := range t.attempted {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "%s: %d attempted, %d failed; ", n, t.attempted[n], t.failed[n])
	}
	return strings.TrimSuffix(b.String(), "; ")
}

func (t *tally) failuresString() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for _, f := range t.failures {
		fmt.Fprintf(&b, "\n  +%v %s: %s", f.at.Round(time.Millisecond), f.target, f.result)
	}
	return b.String()
}

// traffic probes every target from ns at rate new connections (or datagrams) per second each,
// for d, and returns the tally when done. Probes run concurrently so a slow one does not lower
// the rate; the whole run is bounded by d plus one probe timeout.
func traffic(ctx context.Context, ns *netns.NS, targets []target, rate int, d time.Duration) *tally {
	t := &tally{attempted: map[string]int{}, failed: map[string]int{}}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d+2*probeDialer.Timeout)
	defer cancel()
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	for _, tg := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			var pw sync.WaitGroup
			defer pw.Wait()
			for time.Since(start) < d {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				pw.Add(1)
				go func() {
					defer pw.Done()
					t.record(start, tg, probe(ctx, ns, tg))
				}()
			}
		}()
	}
	wg.Wait()
	return t
}

// probe sends one probe to tg and returns "" on success or what went wrong.
func probe(ctx context.Context, ns *netns.NS, tg target) string {
	port := tg.first
	if tg.last > tg.first {
		port = tg.first + uint16(rand.IntN(int(tg.last-tg.first)+1))
	}
	r := probeDialer.Dial(ctx, ns, tg.network, netip.AddrPortFrom(tg.addr, port).String())
	if r.Outcome != lab.Replied {
		return fmt.Sprintf("port %d: %v", port, r)
	}
	wantPort := port
	if tg.want != nil {
		wantPort = tg.want(port)
	}
	ok := r.Reply.Port == wantPort
	if len(tg.pods) > 0 {
		found := false
		for _, p := range tg.pods {
			found = found || p == r.Reply.Pod
		}
		ok = ok && found
	}
	if !ok {
		return fmt.Sprintf("port %d: reply %v, want one of %v on port %d", port, r.Reply, tg.pods, wantPort)
	}
	return ""
}

func (t *tally) record(start time.Time, tg target, fail string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.attempted[tg.name]++
	if fail == "" {
		return
	}
	t.failed[tg.name]++
	if len(t.failures) < maxFailures {
		t.failures = append(t.failures, failure{at: time.Since(start), target: tg.name, result: fail})
	}
}
