package proxier

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/netns"
)

// bigService is a ClusterIP Service with port "http" (80) plus ports-1 others, and its slice
// with eps endpoints in 198.18.130.0/23: it costs about 2 × ports × eps (a slot and a hairpin
// element per endpoint and port).
func bigService(name, ip string, ports, eps int) (*corev1.Service, *discoveryv1.EndpointSlice) {
	s, sl := service(name, ip), slice(name)
	for i := 1; i < ports; i++ {
		n, port, proto := fmt.Sprintf("p%d", i), int32(1000+i), corev1.ProtocolTCP
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: n, Protocol: proto, Port: port, TargetPort: intstr.FromInt32(port)})
		sl.Ports = append(sl.Ports, discoveryv1.EndpointPort{Name: &n, Port: &port, Protocol: &proto})
	}
	for i := 0; i < eps; i++ {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("198.18.%d.%d", 130+i/250, 1+i%250)}})
	}
	return s, sl
}

func addBig(tr *model.Tracker, name string, ports, eps int) {
	s, sl := bigService(name, "198.19.1.1", ports, eps)
	tr.UpsertService(s)
	tr.UpsertEndpointSlice(sl)
}

// TestCostLimitRejectsOnlyThatService: a Service whose rules would cost more than the bound is
// rejected with CostLimit, through the Tracker (log, nftproxy_invalid_services_total, Events,
// /rejections), and not programmed, on the first sync and on a partial one; every other
// Service is programmed by the same syncs; once it fits, it is programmed.
func TestCostLimitRejectsOnlyThatService(t *testing.T) {
	kernels(t, func(t *testing.T, k nft.Interface) {
		rj := &rejections{}
		tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard(), OnRejection: rj.on})
		addService(tr, "a", 0)
		addBig(tr, "big", 2, 40) // about 160
		p := newProxier(t, k, tr, nil)
		p.SetMaxServiceCost(100)
		ctx := context.Background()
		if _, err := p.Sync(ctx, true); err != nil {
			t.Fatalf("first sync: %v", err)
		}
		if got, want := fmt.Sprint(programmed(t, k, "a", "big")), fmt.Sprint(map[string]bool{"a": true, "big": false}); got != want {
			t.Fatalf("after the first sync: programmed %s, want %s", got, want)
		}
		if got := rj.take(); got != "big "+model.ReasonCostLimit {
			t.Fatalf("rejections reported: %q, want %q", got, "big "+model.ReasonCostLimit)
		}
		s := tr.Snapshot().Services[model.ServiceKey{Namespace: "default", Name: "big"}]
		if s == nil || s.Rejected == nil || s.Rejected.Reason != model.ReasonCostLimit {
			t.Fatalf("snapshot of big = %+v; want it rejected with %s", s, model.ReasonCostLimit)
		}
		for _, want := range []string{"service default/big:", "over the limit of 100", "--max-service-cost", "objects"} {
			if !strings.Contains(s.Rejected.Message, want) {
				t.Errorf("message %q does not say %q", s.Rejected.Message, want)
			}
		}
		matchesModel(t, k, tr)

		// A partial sync: big grows (still over), c is new: c is programmed, big stays out.
		addBig(tr, "big", 2, 60)
		addService(tr, "c", 2)
		if _, err := p.Sync(ctx, false); err != nil {
			t.Fatalf("partial sync: %v", err)
		}
		if got, want := fmt.Sprint(programmed(t, k, "a", "big", "c")), fmt.Sprint(map[string]bool{"a": true, "big": false, "c": true}); got != want {
			t.Fatalf("after the partial sync: programmed %s, want %s", got, want)
		}
		if got := rj.take(); got != "big accepted, big "+model.ReasonCostLimit && got != "big "+model.ReasonCostLimit {
			t.Fatalf("rejections reported: %q; want big rejected again with %s", got, model.ReasonCostLimit)
		}
		matchesModel(t, k, tr)

		// It shrinks under the bound: programmed.
		addBig(tr, "big", 2, 5)
		if _, err := p.Sync(ctx, false); err != nil {
			t.Fatalf("sync: %v", err)
		}
		if got := programmed(t, k, "big")["big"]; !got {
			t.Fatalf("big under the bound is not programmed")
		}
		matchesModel(t, k, tr)
	})
}

// opClock is a kernel whose transactions take time on a fake clock, in proportion to their
// ops (the expense of a commit), and which records each transaction.
type opClock struct {
	nft.Interface
	c      *clock
	perOp  time.Duration
	txs    []*nft.Transaction
	before func(tx *nft.Transaction) // called before each Apply
}

func (o *opClock) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	if o.before != nil {
		o.before(tx)
	}
	o.c.advance(time.Duration(tx.Len()) * o.perOp)
	st, err := o.Interface.Apply(ctx, tx)
	if err == nil {
		o.txs = append(o.txs, tx)
	}
	return st, err
}

// holds reports whether tx adds or deletes a dispatch element of Service name.
func holds(tx *nft.Transaction, name string) bool {
	for _, op := range tx.All() {
		if e, ok := elementOf(op.Object); ok && e.Verdict != nil && strings.HasPrefix(e.Comment, "default/"+name+"/") {
			return true
		}
	}
	return false
}

// TestExpensiveChangeCommitsAfterTheOthers: a sync that takes an expensive change (a Service of
// a few thousand objects) and a cheap one commits the cheap one first, in a transaction of its
// own: when the expensive transaction goes to the kernel, the cheap Service is already
// programmed there, and its programming latency does not include the expensive commit's (the
// fake clock charges each transaction by its ops). Each transaction is atomic; in the end the
// kernel holds the model.
func TestExpensiveChangeCommitsAfterTheOthers(t *testing.T) {
	kernels(t, func(t *testing.T, raw nft.Interface) {
		c := &clock{at: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
		k := &opClock{Interface: raw, c: c, perOp: 100 * time.Microsecond}
		tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard(), Now: c.now})
		addService(tr, "a", 0)
		rec := &recorder{}
		b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
		if err != nil {
			t.Fatal(err)
		}
		p := New(tr, k, []*ruleset.Builder{b}, rec, logr.Discard(), c.now)
		ctx := context.Background()
		if _, err := p.Sync(ctx, true); err != nil {
			t.Fatal(err)
		}
		rec.take()

		addBig(tr, "big", 4, 400) // about 3200 objects
		addService(tr, "d", 3)
		k.txs = nil
		var dFirst map[string]bool
		k.before = func(tx *nft.Transaction) {
			if holds(tx, "big") {
				dFirst = programmed(t, raw, "d", "big")
			}
		}
		res, err := p.Sync(ctx, false)
		if err != nil {
			t.Fatalf("sync: %v", err)
		}
		if len(k.txs) != 2 || !holds(k.txs[0], "d") || holds(k.txs[0], "big") || !holds(k.txs[1], "big") || holds(k.txs[1], "d") {
			var desc []string
			for _, tx := range k.txs {
				desc = append(desc, fmt.Sprintf("{%d ops, d: %v, big: %v}", tx.Len(), holds(tx, "d"), holds(tx, "big")))
			}
			t.Fatalf("transactions %v; want d's alone, then big's alone", desc)
		}
		if got, want := fmt.Sprint(dFirst), fmt.Sprint(map[string]bool{"d": true, "big": false}); got != want {
			t.Fatalf("when big's transaction went to the kernel: programmed %s, want %s", got, want)
		}
		if res.Ops != k.txs[0].Len()+k.txs[1].Len() {
			t.Errorf("sync reports %d ops, want both transactions' %d", res.Ops, k.txs[0].Len()+k.txs[1].Len())
		}
		lat := rec.take()
		cheap := time.Duration(k.txs[0].Len()) * k.perOp
		if len(lat) != 2 || lat[0] > cheap || lat[1] < cheap+time.Duration(k.txs[1].Len())*k.perOp {
			t.Fatalf("programming latencies %v; want d's within its own commit (%v) and big's after both", lat, cheap)
		}
		if len(p.heavyQ) != 0 {
			t.Errorf("expensive changes %v still queued after the sync", p.heavyQ)
		}
		matchesModel(t, raw, tr)
	})
}

// TestTwoExpensiveChangesTakeATransactionEach: two expensive changes in one sync are committed
// after the cheap one, each in a transaction of its own, and the sync commits them all.
func TestTwoExpensiveChangesTakeATransactionEach(t *testing.T) {
	c := &clock{at: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	k := &opClock{Interface: nft.NewFake(), c: c}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	addService(tr, "a", 0)
	p := newProxier(t, k, tr, nil)
	ctx := context.Background()
	if _, err := p.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	k.txs = nil
	for i, n := range []string{"big1", "big2"} {
		s, sl := bigService(n, fmt.Sprintf("198.19.1.%d", 1+i), 2, 600)
		tr.UpsertService(s)
		tr.UpsertEndpointSlice(sl)
	}
	addService(tr, "d", 3)
	if _, err := p.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, tx := range k.txs {
		var in []string
		for _, n := range []string{"d", "big1", "big2"} {
			if holds(tx, n) {
				in = append(in, n)
			}
		}
		got = append(got, strings.Join(in, "+"))
	}
	if want := "d, big1, big2"; strings.Join(got, ", ") != want {
		t.Fatalf("transactions carried %q, want %q", strings.Join(got, ", "), want)
	}
	if got := programmed(t, k, "d", "big1", "big2"); !got["d"] || !got["big1"] || !got["big2"] {
		t.Fatalf("after the sync: programmed %v, want all", got)
	}
	matchesModel(t, k, tr)
}

// slowKernel is a kernel whose Apply waits until released, so a test can look at the loop
// while a transaction is in the kernel.
type slowKernel struct {
	nft.Interface
	mu      sync.Mutex
	entered chan struct{}
	release chan struct{}
}

func (s *slowKernel) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	s.mu.Lock()
	entered, release := s.entered, s.release
	s.mu.Unlock()
	if entered != nil {
		close(entered)
		<-release
	}
	return s.Interface.Apply(ctx, tx)
}

// TestStatusProgressMovesDuringASync: while a transaction is in the kernel, the loop's
// Status().Progress (what /healthz reads) is the time it was handed over, not the end of the
// previous sync: a long commit is progress, and a change waiting behind it does not fail the
// probes.
func TestStatusProgressMovesDuringASync(t *testing.T) {
	sk := &slowKernel{Interface: &locked{k: nft.NewFake()}}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	addService(tr, "a", 0)
	r := NewRunner(newProxier(t, sk, tr, nil), RunConfig{MinSyncPeriod: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	r.Notify()
	<-r.synced
	first := r.Status().LastSuccess

	entered, release := make(chan struct{}), make(chan struct{})
	sk.mu.Lock()
	sk.entered, sk.release = entered, release
	sk.mu.Unlock()
	time.Sleep(2 * time.Millisecond) // the clock moves past the first sync's end
	handed := time.Now()
	addService(tr, "b", 1)
	r.Notify()
	<-entered
	st := r.Status()
	sk.mu.Lock()
	sk.entered = nil
	sk.mu.Unlock()
	close(release)
	if !st.Progress.After(first) || st.Progress.Before(handed) {
		t.Fatalf("during the sync: Progress %v, last success %v; want Progress at the hand-over (after %v)", st.Progress, st.LastSuccess, handed)
	}
}

// TestSlowSyncIsLogged: a sync over SlowSync is logged at -v 0 with its phases and the
// costliest Services it built, with their costs; a quick one is not.
func TestSlowSyncIsLogged(t *testing.T) {
	c := &clock{at: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	k := &opClock{Interface: nft.NewFake(), c: c, perOp: time.Millisecond}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard(), Now: c.now})
	addService(tr, "a", 0)
	var mu sync.Mutex
	var lines []string
	log := funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{Verbosity: 0})
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
	if err != nil {
		t.Fatal(err)
	}
	p := New(tr, k, []*ruleset.Builder{b}, nil, log, c.now)
	ctx := context.Background()
	if _, err := p.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 0 {
		t.Fatalf("a quick sync logged %q at -v 0", lines)
	}
	addBig(tr, "big", 4, 400) // thousands of ops: seconds on this clock
	addService(tr, "d", 3)
	if _, err := p.Sync(ctx, false); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 1 {
		t.Fatalf("logged %d lines at -v 0: %q; want one for the slow sync", len(lines), lines)
	}
	for _, want := range []string{`"slow sync`, `"costliestServices"="default/big=`, `default/d=`, `"phases"="build `, `own commit of default/big (`, `"ops"=`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("slow sync log %q does not say %q", lines[0], want)
		}
	}
	if n := strings.Count(lines[0], "default/big="); n != 1 {
		t.Errorf("slow sync log names big's cost %d times, want once: %q", n, lines[0])
	}
}

// TestKernelCheapChangeCommittedWhileExpensivePending proves on the real kernel, read back
// with `nft -j list ruleset` (not through nftproxy's netlink code), that a cheap Service's
// change is in the kernel while an expensive change of the same sync is still pending: when the
// expensive transaction is handed over, the listing names the cheap Service and nothing of the
// expensive one; after it, both.
func TestKernelCheapChangeCommittedWhileExpensivePending(t *testing.T) {
	ns := netns.New(t, "nftp-heavy")
	raw, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	c := &clock{at: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
	k := &opClock{Interface: raw, c: c}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	addService(tr, "a", 0)
	p := newProxier(t, k, tr, nil)
	ctx := context.Background()
	if _, err := p.Sync(ctx, true); err != nil {
		t.Fatal(err)
	}
	list := func() string {
		t.Helper()
		out, err := ns.Run("nft", "-j", "list", "ruleset")
		if err != nil {
			t.Fatalf("nft -j list ruleset: %v\n%s", err, out)
		}
		return out
	}
	const dPort, bigPort = `"default/d/tcp/http"`, `"default/big/tcp/http"`
	addBig(tr, "big", 4, 400)
	addService(tr, "d", 3)
	var during string
	k.before = func(tx *nft.Transaction) {
		if holds(tx, "big") {
			during = list()
		}
	}
	if _, err := p.Sync(ctx, false); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if during == "" {
		t.Fatal("no transaction carried big")
	}
	if !strings.Contains(during, dPort) || strings.Contains(during, bigPort) {
		t.Fatalf("when big's transaction was handed to the kernel, the listing names d: %v, big: %v; want d only",
			strings.Contains(during, dPort), strings.Contains(during, bigPort))
	}
	if after := list(); !strings.Contains(after, dPort) || !strings.Contains(after, bigPort) {
		t.Fatalf("after the sync the listing names d: %v, big: %v; want both", strings.Contains(after, dPort), strings.Contains(after, bigPort))
	}
}

// TestAddResultKeepsCleanupOutcome: a sync that commits a heavy Service in a transaction of its
// own reports the cleanups of both commits (pruned entries, failed families), which the metrics
// count.
func TestAddResultKeepsCleanupOutcome(t *testing.T) {
	a := reconciler.Result{Ops: 3, AffinityPruned: 1, CleanupFailed: []nft.Family{nft.IPv4}}
	b := reconciler.Result{Ops: 2, AffinityPruned: 2, CleanupFailed: []nft.Family{nft.IPv6}}
	got := addResult(a, b)
	if got.Ops != 5 || got.AffinityPruned != 3 || !slices.Equal(got.CleanupFailed, []nft.Family{nft.IPv4, nft.IPv6}) {
		t.Errorf("addResult: ops %d, pruned %d, cleanup failed %v; want 5, 3, [IPv4 IPv6]", got.Ops, got.AffinityPruned, got.CleanupFailed)
	}
}
