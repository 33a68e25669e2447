package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

// TestHealthCheckNodePortBindsNodePortAddresses: with --nodeport-addresses, the health-check
// node port of an externalTrafficPolicy=Local Service answers on the node's addresses inside
// those CIDRs and nowhere else (the redirect to the listener matches the node ports' addresses),
// as kube-proxy.
func TestHealthCheckNodePortBindsNodePortAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(8080)}})
	lb := localLB("lb-local", 42, 30142, local(1)...)
	e.write(lb)
	e.flags = []string{"--nodeport-addresses", lab.NodeIPv4 + "/32"}
	e.start(lb)

	tier.Until(t, e.ctx, 5*time.Second, 100*time.Millisecond, "health check on "+lab.NodeIPv4+" answering 200", func() (bool, string) {
		code, body := healthCheck(t, e)
		return code == http.StatusOK, fmt.Sprintf("%d %v", code, body)
	})
	err := e.lab.Node.Do(func() error {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", healthCheckPort), 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err == nil {
		t.Errorf("health-check node port %d answers on 127.0.0.1 in the node, outside --nodeport-addresses %s/32", healthCheckPort, lab.NodeIPv4)
	}
}

// hcProber probes the health-check node port without pause, in turn from client-1 and from the
// node itself, on the node's IPv4 and IPv6 addresses, as load balancers and the node's own
// checks would, and counts the answers by phase.
type hcProber struct {
	e     *env
	mu    sync.Mutex
	phase string
	count map[string]map[string]int // phase -> "from addr: answer" -> probes
	stop  chan struct{}
	done  chan struct{}
}

func startHCProber(e *env, phase string) *hcProber {
	p := &hcProber{e: e, phase: phase, count: map[string]map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	type source struct {
		name string
		ns   *netns.NS
	}
	sources := []source{{"client", e.lab.Client(1).NS}, {"node", e.lab.Node}}
	addrs := []netip.Addr{netip.MustParseAddr(lab.NodeIPv4), netip.MustParseAddr(lab.NodeIPv6)}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			case <-e.ctx.Done():
				return
			default:
			}
			src, a := sources[i%2], addrs[(i/2)%2]
			r, err := tier.Get(e.ctx, src.ns, "http://"+hostPort(a, healthCheckPort)+"/healthz")
			what := ""
			switch {
			case errors.Is(err, syscall.ECONNREFUSED):
				what = "refused"
			case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				what = "reset after connecting"
			case err != nil:
				what = "no answer: " + err.Error()
			}
			if err == nil {
				var body map[string]any
				_ = json.Unmarshal([]byte(r.Body), &body)
				svc, _ := body["service"].(map[string]any)
				switch {
				case body["holder"] != nil:
					what = fmt.Sprintf("%d other process", r.Code)
				case svc != nil:
					what = fmt.Sprintf("%d nftproxy for %v", r.Code, svc["name"])
				default:
					what = fmt.Sprintf("%d %q", r.Code, r.Body)
				}
			}
			p.mu.Lock()
			if p.count[p.phase] == nil {
				p.count[p.phase] = map[string]int{}
			}
			p.count[p.phase][src.name+" "+a.String()+": "+what]++
			p.mu.Unlock()
		}
	}()
	return p
}

// next starts counting a new phase once every source has been probed in the current one.
func (p *hcProber) next(phase string) {
	p.e.t.Helper()
	tier.Until(p.e.t, p.e.ctx, 30*time.Second, 10*time.Millisecond, "four probes in phase "+p.phase, func() (bool, string) {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := 0
		for _, c := range p.count[p.phase] {
			n += c
		}
		return n >= 8, fmt.Sprint(p.count[p.phase])
	})
	p.mu.Lock()
	p.phase = phase
	p.mu.Unlock()
}

// finish stops the probes and fails the test for every answer that is not one its phase allows
// from its source (want: phase -> source -> answers).
func (p *hcProber) finish(want map[string]map[string][]string) {
	p.e.t.Helper()
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	for phase, answers := range p.count {
		for k, n := range answers {
			p.e.t.Logf("phase %-40s %-48s %d probes", phase, k, n)
			src, _, _ := strings.Cut(k, " ")
			_, got, _ := strings.Cut(k, ": ")
			if w := want[phase][src]; !slices.Contains(w, got) {
				p.e.t.Errorf("phase %s: %d probes got %q, want one of %q", phase, n, k, w)
			}
		}
	}
}

// otherListener holds the health-check node port in the node as another process (kube-proxy)
// would, answering 200 with a body that names it.
func otherListener(t *testing.T, e *env) (stop func()) {
	t.Helper()
	var ln net.Listener
	if err := e.lab.Node.Do(func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", healthCheckPort))
		return err
	}); err != nil {
		t.Fatalf("the other process cannot listen on the health-check node port %d: %v", healthCheckPort, err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"holder":"the other process"}`))
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	var once sync.Once
	stop = func() { once.Do(func() { _ = srv.Close() }) }
	t.Cleanup(stop)
	return stop
}

// TestHealthCheckNodePortHandover: a migration from another proxy (kube-proxy) and the rollback
// to it, as deploy/MIGRATION.md orders them, with probes of an externalTrafficPolicy=Local
// Service's health-check node port running throughout, from a client and from the node itself,
// over IPv4 and IPv6. Not one probe may be refused or answered other than 200.
//
// The one exception is a probe connected to the other process when it exits (phase 4): the
// kernel resets what its listener had accepted; nftproxy's own exit withdraws the redirect
// first and answers what it had accepted (phase 8).
//
//   - Migration: the other process holds the node port; nftproxy starts beside it (it never
//     binds the port, so nothing collides): clients keep getting the other process's answers,
//     the node's own probes nftproxy's. The other process exits: the next probe is nftproxy's,
//     with no sync (nothing changed in the cluster).
//   - Rollback: the other process starts beside nftproxy and can bind the port at once; clients
//     get its answers. nftproxy stops (it withdraws its redirect first, then closes): the node's
//     own probes get the other process's answers too; then nftproxy cleanup removes its tables.
func TestHealthCheckNodePortHandover(t *testing.T) {
	t.Parallel()
	e := newEnv(t, lab.Options{Pods: 2, Ports: []lab.PortSpec{lab.Port(8080)}})
	lb := localLB("lb-handover", 43, 30143, local(1)...)
	e.write(lb)
	// Conntrack runs in the node from the start, as on any node where kube-proxy runs (its
	// rules use it): a fresh namespace has none until nftproxy's rules ask for it, and a
	// connection in flight at that moment would be picked up mid-stream as new and NATed, an
	// artifact of the lab.
	if err := e.lab.NftApply("table inet conntrack-on {\n\tchain c {\n\t\ttype filter hook output priority 0;\n\t\tct state invalid counter\n\t}\n}\n"); err != nil {
		t.Fatal(err)
	}
	stopOther := otherListener(t, e)
	probes := startHCProber(e, "1 other process alone")

	probes.next("2 nftproxy started beside it")
	e.start(lb)
	tier.Until(t, e.ctx, programTimeout, pollInterval, "nftproxy answering the node's own probe beside the other process", func() (bool, string) {
		r, err := tier.Get(e.ctx, e.lab.Node, "http://"+hostPort(netip.MustParseAddr(lab.NodeIPv4), healthCheckPort)+"/healthz")
		return err == nil && strings.Contains(r.Body, "lb-handover"), fmt.Sprint(r, err)
	})
	probes.next("3 nftproxy serving beside it")
	probes.next("4 the other process stopped")
	stopOther()
	probes.next("5 nftproxy alone")

	probes.next("6 the other process started beside nftproxy")
	stopOther = otherListener(t, e)
	probes.next("7 beside nftproxy")
	probes.next("8 nftproxy stopped")
	e.stop()
	probes.next("9 the other process alone")
	if out, err := e.lab.Node.Run(daemonBinary, "cleanup"); err != nil {
		t.Fatalf("nftproxy cleanup: %v\n%s", err, out)
	}
	probes.next("10 after cleanup")

	other, ours := []string{"200 other process"}, []string{"200 nftproxy for lb-handover"}
	both := append(slices.Clone(other), ours...) // the phase's change raced the probe
	by := func(client, node []string) map[string][]string {
		return map[string][]string{"client": client, "node": node}
	}
	probes.finish(map[string]map[string][]string{
		"1 other process alone":        by(other, other),
		"2 nftproxy started beside it": by(other, both),
		"3 nftproxy serving beside it": by(other, ours),
		// A probe the other process had accepted (connected, in its backlog) when it exited
		// is reset by the kernel as the process goes: that is the exit, not a gap.
		"4 the other process stopped":                 by(append(slices.Clone(both), "reset after connecting"), ours),
		"5 nftproxy alone":                            by(ours, ours),
		"6 the other process started beside nftproxy": by(both, ours),
		"7 beside nftproxy":                           by(other, ours),
		"8 nftproxy stopped":                          by(other, both),
		"9 the other process alone":                   by(other, other),
		"10 after cleanup":                            by(other, other),
	})
}
