package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/nfttest"
)

// kernels runs a test against the fake and, as root, against the real kernel in a fresh
// namespace: every behaviour the fake stands for is proven once on the kernel too.
func kernels(t *testing.T, test func(t *testing.T, open func() nft.Interface)) {
	t.Run("fake", func(t *testing.T) { test(t, func() nft.Interface { return nft.NewFake() }) })
	t.Run("kernel", func(t *testing.T) {
		ns := netns.New(t, "nftp-rec")
		test(t, func() nft.Interface {
			k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { k.Close() })
			return k
		})
	})
}

// Address plan: as in proxy/ruleset's tests. Services get ClusterIPs from 198.19.0.0/16 and
// fd00:19::/112, endpoints from 198.18.128.0/17 and fd00:128::/64.

type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// harness feeds the builder's fragments to a Reconciler over a kernel, as the sync loop does.
type harness struct {
	t        *testing.T
	kernel   nft.Interface
	clk      *clock
	rec      *reconciler.Reconciler
	builders []*ruleset.Builder
	node     *model.Node
	svcs     map[model.ServiceKey]*model.Service
}

func newHarness(t *testing.T, kernel nft.Interface) *harness {
	h := &harness{t: t, kernel: kernel, clk: &clock{t: time.Unix(1_800_000_000, 0)}, svcs: map[model.ServiceKey]*model.Service{},
		node: &model.Node{Name: "node-a", Addresses: []netip.Addr{netip.MustParseAddr("198.18.1.1"), netip.MustParseAddr("fd00:1::1")}}}
	var tables []nft.Table
	for _, fam := range []nft.Family{nft.IPv4, nft.IPv6} {
		b, err := ruleset.NewBuilder(ruleset.Config{Family: fam, MasqueradeMark: 0x4000, DropMark: 0x8000,
			ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.128.0/17"), netip.MustParsePrefix("fd00:128::/64")},
			// One endpoint-map shard: Services share their pick chains whatever their names, as
			// the tests of chains shared and deleted later need.
			EndpointShards: 1})
		if err != nil {
			t.Fatal(err)
		}
		h.builders = append(h.builders, b)
		tables = append(tables, b.Table())
	}
	h.rec = reconciler.New(kernel, logr.Discard(), h.clk.now, tables...)
	for _, b := range h.builders {
		h.rec.Set(b.Table(), reconciler.Owner{}, b.Base(h.node))
	}
	return h
}

func (h *harness) put(svcs ...*model.Service) {
	for _, s := range svcs {
		h.svcs[s.Key] = s
		for _, b := range h.builders {
			h.rec.Set(b.Table(), reconciler.Owner(s.Key), b.Service(h.node, s))
		}
	}
}

func (h *harness) remove(k model.ServiceKey) {
	delete(h.svcs, k)
	for _, b := range h.builders {
		h.rec.Set(b.Table(), reconciler.Owner(k), fragment.Fragment{})
	}
}

func (h *harness) commit(full bool) reconciler.Result {
	h.t.Helper()
	res, err := h.rec.Commit(context.Background(), full)
	if err != nil {
		h.t.Fatalf("commit: %v", err)
	}
	return res
}

// check lets pending chain deletions happen, then compares what the kernel holds with a
// from-scratch build of the current model.
func (h *harness) check() {
	h.t.Helper()
	if h.rec.PendingCleanup() {
		h.clk.advance(reconciler.StaleChainDelay)
		h.commit(false)
	}
	var list []*model.Service
	for _, s := range h.svcs {
		list = append(list, s)
	}
	for _, b := range h.builders {
		got, err := h.kernel.Dump(context.Background(), b.Table())
		if err != nil {
			h.t.Fatalf("dump %s: %v", b.Table(), err)
		}
		want := b.Ruleset(h.node, list)
		if d := nft.Diff(nft.Canonical(got), nft.Canonical(want)); d != "" {
			h.t.Fatalf("table %s differs from a fresh build (- kernel, + wanted):\n%s", b.Table(), d)
		}
	}
}

func svc(i int, eps int) *model.Service {
	name := fmt.Sprintf("svc-%d", i)
	ip4 := netip.AddrFrom4([4]byte{198, 19, byte(i >> 8), byte(i)})
	ip6 := netip.MustParseAddr(fmt.Sprintf("fd00:19::%x", i+1))
	var endpoints []model.Endpoint
	for e := 0; e < eps; e++ {
		endpoints = append(endpoints,
			model.Endpoint{Addr: netip.AddrFrom4([4]byte{198, 18, byte(128 + e/250), byte(10 + e%250)}), Port: 8080, Ready: true},
			model.Endpoint{Addr: netip.MustParseAddr(fmt.Sprintf("fd00:128::%x", 16+e)), Port: 8080, Ready: true})
	}
	return &model.Service{Key: model.ServiceKey{Namespace: "default", Name: name}, Ports: []model.ServicePort{{
		Name: model.PortName{Service: model.ServiceKey{Namespace: "default", Name: name}, Port: "http", Protocol: model.TCP},
		Port: 80, PortEnd: 80, TargetPort: 8080, NodePort: uint16(30000 + i),
		ClusterIPs: []netip.Addr{ip4, ip6}, Endpoints: endpoints,
	}}}
}

func TestFirstSyncThenRestartSendsNothing(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		fake := open()
		h := newHarness(t, fake)
		for i := 0; i < 50; i++ {
			h.put(svc(i, 1+i%4))
		}
		res := h.commit(false)
		if !res.Full || res.Ops == 0 {
			t.Fatalf("first commit: full=%v ops=%d, want a full commit with ops", res.Full, res.Ops)
		}
		h.check()

		// A restarted daemon on the same kernel: nothing differs, so nothing is sent (no blackout).
		h2 := newHarness(t, fake)
		for i := 0; i < 50; i++ {
			h2.put(svc(i, 1+i%4))
		}
		if res := h2.commit(false); res.Ops != 0 || res.Repairs != 0 {
			t.Fatalf("restart against an identical kernel sent %d ops (repairs %d), want 0", res.Ops, res.Repairs)
		}
	})
}

// TestRestartWithAnotherModelSendsTheDifference: a restart reads the kernel back linked to its
// desired state (an element held exactly as desired only marks its entry); what differs is
// repaired, the kernel then equals a fresh build, and the applied state it keeps is true: a full
// commit after it finds nothing and a partial one changes exactly what changed.
func TestRestartWithAnotherModelSendsTheDifference(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		k := open()
		h := newHarness(t, k)
		for i := 0; i < 50; i++ {
			h.put(svc(i, 1+i%4))
		}
		h.commit(false)

		h2 := newHarness(t, k)
		for i := 0; i < 55; i++ {
			switch {
			case i < 10:
				h2.put(svc(i, 5)) // endpoints changed
			case i < 40 || i >= 50:
				h2.put(svc(i, 1+i%4)) // the same, and five new
			}
		}
		if res := h2.commit(false); !res.Full || res.Ops == 0 {
			t.Fatalf("restart: full=%v ops=%d, want a full commit sending the difference", res.Full, res.Ops)
		}
		h2.check()
		if res := h2.commit(true); res.Ops != 0 || res.Repairs != 0 {
			t.Fatalf("full commit after the restart sent %d ops (repairs %d), want 0", res.Ops, res.Repairs)
		}
		h2.put(svc(20, 2))
		if res := h2.commit(false); res.Full || res.Ops == 0 {
			t.Fatalf("partial commit: full=%v ops=%d", res.Full, res.Ops)
		}
		h2.check()
	})
}

func TestPartialSyncCostFollowsTheChange(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		h := newHarness(t, open())
		for i := 0; i < 300; i++ {
			h.put(svc(i, 3))
		}
		h.commit(false)

		cases := []struct {
			name   string
			change func()
			maxOps int
		}{
			{"one endpoint address changes", func() {
				s := svc(7, 3)
				s.Ports[0].Endpoints[0].Addr = netip.MustParseAddr("198.18.129.99")
				h.put(s)
			}, 16}, // slots follow the sorted endpoints: at most every slot of its 2 frontends, plus hairpin
			{"endpoint count 3 -> 4 (slots and dispatch verdicts)", func() { h.put(svc(8, 4)) }, 30},
			{"one new service", func() { h.put(svc(1000, 2)) }, 30},
			{"service loses all endpoints", func() { h.put(svc(9, 0)) }, 30},
			{"service removed", func() { h.remove(model.ServiceKey{Namespace: "default", Name: "svc-10"}) }, 30},
			{"no change", func() {}, 0},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				h.t = t
				c.change()
				res := h.commit(false)
				if res.Full {
					t.Errorf("commit was full, want partial")
				}
				if res.Ops > c.maxOps {
					t.Errorf("sent %d ops for one change among 300 services, want at most %d", res.Ops, c.maxOps)
				}
				h.check()
			})
		}
	})
}

func TestRemovedChainsAreDeletedLater(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		fake := open()
		h := newHarness(t, fake)
		// svc-1 is the only Service with 2 endpoints: the shared chain of that count goes with it.
		h.put(svc(1, 2), svc(2, 3))
		h.commit(false)
		h.remove(model.ServiceKey{Namespace: "default", Name: "svc-1"})
		h.commit(false)
		chain := "pick-2-s0" // the shared chain of 2 slots; ruleset's TestSharedChainNames pins the name
		if !hasChain(t, fake, chain) {
			t.Fatalf("chain %s deleted in the same transaction that removed its references; want it flushed and deleted later", chain)
		}
		if !h.rec.PendingCleanup() {
			t.Fatal("PendingCleanup() = false with a flushed chain waiting")
		}
		if res := h.commit(false); res.Ops != 0 {
			t.Errorf("commit before StaleChainDelay sent %d ops, want 0", res.Ops)
		}
		h.clk.advance(reconciler.StaleChainDelay)
		if res := h.commit(false); res.Ops == 0 {
			t.Error("commit after StaleChainDelay deleted nothing")
		}
		if hasChain(t, fake, chain) {
			t.Errorf("chain %s still present after StaleChainDelay", chain)
		}
		if h.rec.PendingCleanup() {
			t.Error("PendingCleanup() still true")
		}
		h.check()
	})
}

func hasChain(t *testing.T, k nft.Interface, name string) bool {
	rs, err := k.Dump(context.Background(), nft.Table{Family: nft.IPv4, Name: ruleset.DefaultTable})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rs.Chains {
		if c.Name == name {
			return true
		}
	}
	return false
}

func TestFullResyncRepairsDrift(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		fake := open()
		h := newHarness(t, fake)
		for i := 0; i < 20; i++ {
			h.put(svc(i, 2))
		}
		h.commit(false)
		t4 := nft.Table{Family: nft.IPv4, Name: ruleset.DefaultTable}
		rs, err := fake.Dump(context.Background(), t4)
		if err != nil {
			t.Fatal(err)
		}
		// An operator deletes a map element and a rule, and adds a stray rule.
		tx := nft.NewTransaction(t4)
		el := rs.Elements[ruleset.MapServiceIPs][0]
		tx.Delete(&el)
		tx.Add(&nft.Rule{Chain: ruleset.ChainServices, Exprs: []nft.Expr{nft.Verdict{Kind: nft.VerdictAccept}}, Comment: "stray"})
		if _, err := fake.Apply(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		res := h.commit(true)
		if res.Repairs < 2 {
			t.Errorf("repairs = %d, want >= 2 (a deleted element, a changed chain)", res.Repairs)
		}
		h.check()
		// Someone flushes the whole table.
		tx = nft.NewTransaction(t4)
		tx.Delete(&nft.TableObj{})
		if _, err := fake.Apply(context.Background(), tx); err != nil {
			t.Fatal(err)
		}
		if res := h.commit(true); res.Repairs == 0 {
			t.Error("a deleted table was not counted as drift")
		}
		h.check()
	})
}

// losing passes each batch to the kernel and, when the kernel refuses one, loses the reply that
// named the refused op, as an overflowed receive buffer does (ENOBUFS): the caller learns that
// the batch failed, not which op.
type losing struct {
	nft.Interface
}

func (k *losing) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	st, err := k.Interface.Apply(ctx, tx)
	if err != nil {
		err = fmt.Errorf("apply transaction (%d ops): read kernel replies: %w", tx.Len(),
			&nft.OpError{Index: -1, Err: syscall.ENOBUFS, Detail: "the reply naming the refused op was lost (" + err.Error() + ")"})
	}
	return st, err
}

// TestUnknownFailureRetriesFull: the kernel refuses an op part-way through a batch and the reply
// that named it is lost (a failure of unknown extent, as a socket error is). The kernel keeps
// what it held, the error is traced to no owner, and the next Commit reads the kernel back (a
// full one) rather than trust what it believes.
func TestUnknownFailureRetriesFull(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		bad := svc(3, 2) // with affinity: it owns its chains in the ip6 table
		bad.Ports[0].AffinityTimeout = time.Hour
		raw := open()
		k := &losing{Interface: refuseChains(raw, ruleset.ServiceChain(bad.Ports[0].Name), ruleset.ExternalChain(bad.Ports[0].Name))}
		h := newHarness(t, k)
		h.put(svc(1, 1))
		h.commit(false)
		tbl := nft.Table{Family: nft.IPv4, Name: ruleset.DefaultTable}
		before, _ := raw.Dump(context.Background(), tbl)

		h.put(svc(2, 2), bad)
		_, err := h.rec.Commit(context.Background(), false)
		if err == nil || !errors.Is(err, syscall.ENOBUFS) {
			t.Fatalf("commit error = %v, want the lost reply's ENOBUFS wrapped", err)
		}
		if _, ok := reconciler.RefusedOwner(err); ok {
			t.Errorf("an error naming no op was traced to an owner: %v", err)
		}
		after, _ := raw.Dump(context.Background(), tbl)
		if d := nft.Diff(nft.Canonical(before), nft.Canonical(after)); d != "" {
			t.Fatalf("a refused commit changed the kernel:\n%s", d)
		}
		h.remove(bad.Key)
		res := h.commit(false)
		if !res.Full {
			t.Error("the commit after a failure of unknown extent was not a full one")
		}
		h.check()
	})
}

// refuseChains makes the kernel truly refuse an op part-way through the batch: on the fake
// through its RefuseOp hook (a rule added to one of chains), on the real kernel by rewriting
// the verdict of map elements that go to one of chains into a jump to a chain that does not
// exist (ENOENT from the kernel, found by the extended ack).
func refuseChains(k nft.Interface, chains ...string) nft.Interface {
	set := map[string]bool{}
	for _, c := range chains {
		set[c] = true
	}
	if f, ok := k.(*nft.Fake); ok {
		f.RefuseOp = func(op nft.Op) syscall.Errno {
			if r, ok := op.Object.(*nft.Rule); ok && op.Verb == nft.VerbAdd && set[r.Chain] {
				return syscall.EPERM
			}
			return 0
		}
		return f
	}
	return &refusing{Interface: k, chains: set}
}

// refusing rewrites element verdicts that go to chains into jumps to a missing chain.
type refusing struct {
	nft.Interface
	chains map[string]bool
}

func (k *refusing) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	out := &nft.Transaction{Table: tx.Table}
	for _, op := range tx.All() { // one Op per operation, so the indexes stay those of tx
		out.Ops = append(out.Ops, op)
	}
	for i, op := range out.Ops {
		if e, ok := elementOf(op.Object); ok && op.Verb == nft.VerbAdd && e.Verdict != nil && k.chains[e.Verdict.Chain] {
			bad, v := *e, *e.Verdict
			v.Chain = "no-such-chain"
			bad.Verdict = &v
			out.Ops[i].Object = &bad
		}
	}
	return k.Interface.Apply(ctx, out)
}

// TestRefusedCommitKeepsKernelAndNamesOwner: the kernel refuses one op of a Service part-way
// through a batch. Nothing of the batch stays (ops before the refused one included), the error
// names the Service, and once its fragment is removed the next Commit is partial and programs
// everything else.
func TestRefusedCommitKeepsKernelAndNamesOwner(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		bad := svc(3, 2) // with affinity: it owns its chains in the ip6 table (shared-mode ports own none)
		bad.Ports[0].AffinityTimeout = time.Hour
		raw := open()
		k := refuseChains(raw, ruleset.ServiceChain(bad.Ports[0].Name), ruleset.ExternalChain(bad.Ports[0].Name))
		h := newHarness(t, k)
		h.put(svc(1, 1))
		h.commit(false)
		tbl := nft.Table{Family: nft.IPv4, Name: ruleset.DefaultTable}
		before, _ := raw.Dump(context.Background(), tbl)

		h.put(svc(2, 2), bad, svc(4, 1))
		_, err := h.rec.Commit(context.Background(), false)
		if err == nil {
			t.Fatal("commit succeeded, want the injected refusal")
		}
		owner, ok := reconciler.RefusedOwner(err)
		if !ok || owner != reconciler.Owner(bad.Key) {
			t.Fatalf("RefusedOwner(%v) = %q, %v; want %q", err, owner, ok, bad.Key)
		}
		// The kernel layer says which transaction failed; the reconciler does not say it again.
		if n := strings.Count(err.Error(), "apply transaction ("); n != 1 {
			t.Errorf("the error says %d times which transaction failed, want once: %v", n, err)
		}
		after, _ := raw.Dump(context.Background(), tbl)
		if d := nft.Diff(nft.Canonical(before), nft.Canonical(after)); d != "" {
			t.Fatalf("a refused commit changed the kernel:\n%s", d)
		}
		h.remove(bad.Key)
		res := h.commit(false)
		if res.Full {
			t.Error("the commit after a refusal that named its op was a full one: the kernel's state was known")
		}
		h.check()
	})
}

// TestLongAndOddNamesFullResyncRepairsNothing: the Service (team-a, a 63-character
// name, a 15-character port name, NodePort) and one with names no API server allows (a NUL,
// multi-byte characters) apply, and a full resync right after finds no drift: what the kernel
// lists back is what was built.
func TestLongAndOddNamesFullResyncRepairsNothing(t *testing.T) {
	kernels(t, func(t *testing.T, open func() nft.Interface) {
		h := newHarness(t, open())
		long := svc(1, 2)
		long.Key = model.ServiceKey{Namespace: "team-a", Name: "a" + strings.Repeat("b", 61) + "c"}
		long.Ports[0].Name = model.PortName{Service: long.Key, Port: "abcdefghijklm-o", Protocol: model.TCP}
		odd := svc(2, 2)
		odd.Key = model.ServiceKey{Namespace: "a\x00b", Name: strings.Repeat("é", 150)}
		odd.Ports[0].Name = model.PortName{Service: odd.Key, Port: "p\xff", Protocol: model.TCP}
		h.put(long, odd, svc(3, 1))
		h.commit(false)
		res := h.commit(true)
		if res.Repairs != 0 || res.Ops != 0 {
			t.Fatalf("full resync after applying long names: %d repairs, %d ops; want none", res.Repairs, res.Ops)
		}
		h.check()
	})
}

// TestRefusedSharedElementNamesAnOwnerThatHoldsIt: an element two owners want is traced to one
// that still holds it, also after the owner that added it first has let it go.
func TestRefusedSharedElementNamesAnOwnerThatHoldsIt(t *testing.T) {
	f := nft.NewFake()
	tbl := nft.Table{Family: nft.IPv4, Name: ruleset.DefaultTable}
	r := reconciler.New(f, logr.Discard(), time.Now, tbl)
	set := nft.Set{Name: "s", Key: []nft.Type{nft.TypeIPv4Addr}}
	shared := nft.Element{Set: "s", Key: []nft.Value{nft.Addr(netip.MustParseAddr("198.18.128.10"))}}
	own := func(a string) nft.Element {
		return nft.Element{Set: "s", Key: []nft.Value{nft.Addr(netip.MustParseAddr(a))}}
	}
	r.Set(tbl, reconciler.Owner{}, fragment.Fragment{Sets: []nft.Set{set}})
	r.Set(tbl, reconciler.Owner{Namespace: "ns", Name: "a"}, fragment.Fragment{Elements: []nft.Element{shared, own("198.18.128.11")}})
	r.Set(tbl, reconciler.Owner{Namespace: "ns", Name: "b"}, fragment.Fragment{Elements: []nft.Element{shared}})
	r.Set(tbl, reconciler.Owner{Namespace: "ns", Name: "a"}, fragment.Fragment{Elements: []nft.Element{own("198.18.128.11")}}) // a lets go
	f.RefuseOp = func(op nft.Op) syscall.Errno {
		if e, ok := elementOf(op.Object); ok && e.Key[0] == shared.Key[0] {
			return syscall.EPERM
		}
		return 0
	}
	_, err := r.Commit(context.Background(), false)
	if owner, ok := reconciler.RefusedOwner(err); !ok || owner != (reconciler.Owner{Namespace: "ns", Name: "b"}) {
		t.Fatalf("RefusedOwner(%v) = %q, %v; want ns/b, the owner that still holds the element", err, owner, ok)
	}
}

// elementOf returns an op's element, whether the op carries it packed (as the reconciler sends
// its elements) or not.
func elementOf(o nft.Object) (*nft.Element, bool) {
	e, ok := nfttest.ElementOf(o)
	return &e, ok
}

func mustElement(o nft.Object) *nft.Element {
	e, _ := elementOf(o)
	return e
}
