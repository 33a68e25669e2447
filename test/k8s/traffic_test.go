package k8s

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// steadyService is a Service that does not change during a handover: TCP and UDP port 80 on
// ClusterIPv4(ip), endpoints pods 1 and 2.
func steadyService(ip int) fixture.Service {
	return fixture.Service{Name: "steady", Namespace: testNS, ClusterIPs: []netip.Addr{lab.ClusterIPv4(ip)},
		Ports:     []fixture.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80}, {Name: "dns", Protocol: corev1.ProtocolUDP, Port: 80}},
		Endpoints: fixture.Pods(1, 2)}
}

// phaseCount is what one phase of a handover saw.
type phaseCount struct {
	tcp, tcpFailed, udp, udpLost, wrong, hc, hcRefused int
}

func (c phaseCount) String() string {
	return fmt.Sprintf("new TCP %d (failed %d), UDP %d (lost %d), wrong backend %d, health-check probes %d (not 200: %d)",
		c.tcp, c.tcpFailed, c.udp, c.udpLost, c.wrong, c.hc, c.hcRefused)
}

// traffic runs new TCP connections, UDP exchanges and health-check probes against a steady
// Service from client-1 in a loop (every 20 ms) through the phases of a handover, and keeps
// long-lived TCP connections open across them.
type traffic struct {
	e      *env
	svc    fixture.Service
	hcPort int

	mu     sync.Mutex
	phase  string
	phases []string
	counts map[string]*phaseCount

	flows  []*lab.Flow
	owners []string // the pod behind each flow
	stop   context.CancelFunc
	done   chan struct{}
}

func startTraffic(t *testing.T, e *env, svc fixture.Service, hcPort int, phase string) *traffic {
	tr := &traffic{e: e, svc: svc, hcPort: hcPort, counts: map[string]*phaseCount{}, done: make(chan struct{})}
	tr.setPhase(phase)
	for range 5 {
		f := lab.NewFlow(e.lab.Client(1).NS, "tcp", vip(svc))
		r := f.Probe(e.ctx)
		if r.Outcome != lab.Replied {
			t.Fatalf("long-lived connection to %s: %v", vip(svc), r)
		}
		t.Cleanup(f.Close)
		tr.flows, tr.owners = append(tr.flows, f), append(tr.owners, r.Reply.Pod)
	}
	ctx, cancel := context.WithCancel(e.ctx)
	tr.stop = cancel
	go tr.run(ctx)
	return tr
}

func (tr *traffic) setPhase(p string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.phase = p
	tr.phases = append(tr.phases, p)
	tr.counts[p] = &phaseCount{}
}

func (tr *traffic) add(f func(c *phaseCount)) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	f(tr.counts[tr.phase])
}

func (tr *traffic) run(ctx context.Context) {
	defer close(tr.done)
	want := []string{"pod-1", "pod-2"}
	udpAddr := vip(tr.svc) // the same address, UDP port 80
	for ctx.Err() == nil {
		r := lab.Dial(ctx, tr.e.lab.Client(1).NS, "tcp", vip(tr.svc))
		u := lab.Dial(ctx, tr.e.lab.Client(1).NS, "udp", udpAddr)
		hc := tr.e.healthCheck(tr.hcPort)
		if ctx.Err() != nil {
			return // a probe cut short by the end of the run counts for nothing
		}
		tr.add(func(c *phaseCount) {
			c.tcp++
			if r.Outcome != lab.Replied {
				c.tcpFailed++
			} else if !slices.Contains(want, r.Reply.Pod) {
				c.wrong++
			}
			c.udp++
			if u.Outcome != lab.Replied {
				c.udpLost++
			} else if !slices.Contains(want, u.Reply.Pod) {
				c.wrong++
			}
			c.hc++
			if !strings.Contains(hc, " 200 ") {
				c.hcRefused++
			}
		})
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// finish stops the loop, probes the long-lived connections, logs every phase and fails the
// test for a failed connection, a lost UDP exchange, a wrong backend or a connection broken
// or moved. Health-check probes are only logged: a handover of their port has a gap.
func (tr *traffic) finish(t *testing.T, what string) {
	t.Helper()
	tr.stop()
	<-tr.done
	kept := 0
	for i, f := range tr.flows {
		if r := f.Probe(tr.e.ctx); r.Outcome == lab.Replied && r.Reply.Pod == tr.owners[i] {
			kept++
		} else {
			t.Errorf("%s: long-lived connection %d (to %s): got %v, want %s still answering", what, i, tr.owners[i], r, tr.owners[i])
		}
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, p := range tr.phases {
		c := *tr.counts[p]
		t.Logf("%s, %s: %v", what, p, c)
		if c.tcpFailed > 0 || c.udpLost > 0 || c.wrong > 0 {
			t.Errorf("%s, %s: %v, want no failed, lost or misdirected exchange", what, p, c)
		}
	}
	t.Logf("%s: long-lived connections kept: %d/%d", what, kept, len(tr.flows))
}
