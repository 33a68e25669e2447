package proxier

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/nfttest"
)

// kernels runs a test on the fake and, as root, on the real kernel in a fresh namespace.
func kernels(t *testing.T, test func(t *testing.T, k nft.Interface)) {
	t.Run("fake", func(t *testing.T) { test(t, nft.NewFake()) })
	t.Run("kernel", func(t *testing.T) {
		ns := netns.New(t, "nftp-iso")
		k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { k.Close() })
		test(t, k)
	})
}

// refusal makes the kernel truly refuse the ops of the Services it names, part-way through a
// batch: their dispatch elements (each names its Service port in its comment) and the rules of
// their own chains (named after the port). On the fake with RefuseOp; on the real kernel by
// rewriting those elements and rules into gotos to a chain that does not exist (the kernel
// answers ENOENT, and its extended ack names the op).
type refusal struct {
	nft.Interface
	mu    sync.Mutex
	ports map[string]bool
}

func refuse(k nft.Interface) *refusal {
	r := &refusal{Interface: k, ports: map[string]bool{}}
	if f, ok := k.(*nft.Fake); ok {
		f.RefuseOp = func(op nft.Op) syscall.Errno {
			if e, ok := elementOf(op.Object); ok && op.Verb == nft.VerbAdd && r.refused(e) {
				return syscall.EPERM
			}
			if rl, ok := op.Object.(*nft.Rule); ok && op.Verb == nft.VerbAdd && r.ownChain(rl.Chain) {
				return syscall.EPERM
			}
			return 0
		}
	}
	return r
}

// set makes the Services named refused (none: heal).
func (r *refusal) set(names ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.ports)
	for _, n := range names {
		r.ports[portOf(n).String()] = true
	}
}

// refused reports whether e is a dispatch element of a refused Service.
func (r *refusal) refused(e *nft.Element) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return e.Verdict != nil && r.ports[e.Comment]
}

// ownChain reports whether chain is an own chain of a refused Service ("svc-HASH-<port>").
func (r *refusal) ownChain(chain string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p := range r.ports {
		if strings.HasSuffix(chain, "-"+p) {
			return true
		}
	}
	return false
}

func (r *refusal) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	if _, ok := r.Interface.(*nft.Fake); ok {
		return r.Interface.Apply(ctx, tx)
	}
	out := &nft.Transaction{Table: tx.Table}
	for _, op := range tx.All() { // one Op per operation, so the indexes stay those of tx
		out.Ops = append(out.Ops, op)
	}
	for i, op := range out.Ops {
		if e, ok := elementOf(op.Object); ok && op.Verb == nft.VerbAdd && r.refused(e) {
			bad, v := *e, *e.Verdict
			v.Chain = "no-such-chain"
			bad.Verdict = &v
			out.Ops[i].Object = &bad
		}
		if rl, ok := op.Object.(*nft.Rule); ok && op.Verb == nft.VerbAdd && r.ownChain(rl.Chain) {
			bad := *rl
			bad.Exprs = []nft.Expr{nft.Verdict{Kind: nft.VerdictJump, Chain: "no-such-chain"}}
			out.Ops[i].Object = &bad
		}
	}
	return r.Interface.Apply(ctx, out)
}

func portOf(name string) model.PortName {
	return model.PortName{Service: model.ServiceKey{Namespace: "default", Name: name}, Port: "http", Protocol: model.TCP}
}

// rejections records the Tracker's rejection callbacks (what the daemon turns into log lines,
// nftproxy_invalid_services_total and, through the snapshot, Events).
type rejections struct {
	mu  sync.Mutex
	got []string
}

func (r *rejections) on(k model.ServiceKey, rj *model.Rejection) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rj == nil {
		r.got = append(r.got, k.Name+" accepted")
		return
	}
	r.got = append(r.got, k.Name+" "+rj.Reason)
}

func (r *rejections) take() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := strings.Join(r.got, ", ")
	r.got = nil
	return s
}

// programmed reports, from the kernel, which of names have their dispatch element in place,
// going to a chain that exists, with endpoints in its slots.
func programmed(t *testing.T, k nft.Interface, names ...string) map[string]bool {
	t.Helper()
	rs, err := k.Dump(context.Background(), table4)
	if err != nil {
		t.Fatalf("dump: %v", err)
	}
	out := map[string]bool{}
	for _, n := range names {
		d := dispatchOf(rs, portOf(n))
		if d == nil {
			out[n] = false
			continue
		}
		hasChain := false
		for _, c := range rs.Chains {
			hasChain = hasChain || c.Name == d.Verdict.Chain
		}
		out[n] = hasChain && len(slotsOf(rs, d)) > 0
	}
	return out
}

// matchesModel fails the test unless the kernel holds exactly a fresh build of the tracker's
// model (refused Services are rejected there, so they have no objects): every other Service is
// fully programmed, nothing of the refused one is left (but chains awaiting deletion).
func matchesModel(t *testing.T, k nft.Interface, tr *model.Tracker) {
	t.Helper()
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
	if err != nil {
		t.Fatal(err)
	}
	snap := tr.Snapshot()
	got, err := k.Dump(context.Background(), table4)
	if err != nil {
		t.Fatal(err)
	}
	want := b.Ruleset(snap.Node, snap.Sorted())
	// A chain nobody wants is flushed at once and deleted a second later (StaleChainDelay).
	wanted, used := map[string]bool{}, map[string]bool{}
	for _, c := range want.Chains {
		wanted[c.Name] = true
	}
	for _, r := range got.Rules {
		used[r.Chain] = true
	}
	var chains []nft.Chain
	for _, c := range got.Chains {
		if wanted[c.Name] || used[c.Name] {
			chains = append(chains, c)
		}
	}
	got.Chains = chains
	if d := nft.Diff(nft.Canonical(got), nft.Canonical(want)); d != "" {
		t.Fatalf("the kernel differs from a fresh build of the model (- kernel, + wanted):\n%s", d)
	}
}

func addService(tr *model.Tracker, name string, i int) {
	ip := fmt.Sprintf("198.19.0.%d", 10+i)
	tr.UpsertService(service(name, ip))
	tr.UpsertEndpointSlice(slice(name, fmt.Sprintf("198.18.128.%d", 10+i)))
}

// TestKernelRefusalIsolatesTheService: the kernel refuses one Service's op part-way through the
// batch. The same Sync rejects that Service with KernelRefused (reported through the Tracker),
// commits every other Service, and succeeds; the next Sync is no failure. The Service is tried
// again when it changes, and at a full resync, and works once the kernel takes it.
func TestKernelRefusalIsolatesTheService(t *testing.T) {
	kernels(t, func(t *testing.T, raw nft.Interface) {
		k := refuse(raw)
		rj := &rejections{}
		tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard(), OnRejection: rj.on})
		for i, n := range []string{"a", "bad", "c"} {
			addService(tr, n, i)
		}
		rec := &recorder{}
		p := newProxier(t, k, tr, rec)
		ctx := context.Background()
		all := []string{"a", "bad", "c", "d"}

		// The first (full) sync.
		k.set("bad")
		if _, err := p.Sync(ctx, true); err != nil {
			t.Fatalf("first sync failed: %v; want the refused Service isolated", err)
		}
		want := map[string]bool{"a": true, "bad": false, "c": true, "d": false}
		if got := programmed(t, raw, all...); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after the sync: programmed %v, want %v", got, want)
		}
		matchesModel(t, raw, tr)
		if got := rj.take(); got != "bad KernelRefused" {
			t.Fatalf("rejections reported: %q, want %q", got, "bad KernelRefused")
		}
		s := tr.Snapshot().Services[model.ServiceKey{Namespace: "default", Name: "bad"}]
		if s == nil || s.Rejected == nil || s.Rejected.Reason != model.ReasonKernelRefused || !strings.Contains(s.Rejected.Message, "kernel refused") {
			t.Fatalf("snapshot of the refused Service = %+v; want it rejected with %s (what the Event scanner reads)", s, model.ReasonKernelRefused)
		}
		if tr.Pending() != 0 {
			t.Errorf("the refusal left %d changes pending (a stale sync for /healthz)", tr.Pending())
		}
		if res, err := p.Sync(ctx, false); err != nil || res.Ops != 0 {
			t.Fatalf("next sync: %d ops, err %v; want nothing to do and no failure", res.Ops, err)
		}

		// A partial sync with a newly refused Service among other changes.
		addService(tr, "d", 3)
		tr.UpsertEndpointSlice(slice("a", "198.18.128.99"))
		k.set("bad", "c")
		// A second endpoint: c's dispatch element moves to another pick chain (an op to refuse).
		tr.UpsertEndpointSlice(slice("c", "198.18.128.98", "198.18.128.96"))
		if _, err := p.Sync(ctx, false); err != nil {
			t.Fatalf("partial sync failed: %v", err)
		}
		want = map[string]bool{"a": true, "bad": false, "c": false, "d": true}
		if got := programmed(t, raw, all...); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after the partial sync: programmed %v, want %v", got, want)
		}
		matchesModel(t, raw, tr)
		if got := rj.take(); got != "c KernelRefused" {
			t.Fatalf("rejections reported: %q, want %q", got, "c KernelRefused")
		}
		if got := endpointsOf(t, raw, portOf("a")); fmt.Sprint(got) != "[198.18.128.99]" {
			t.Errorf("endpoints of a = %v: the change that came with the refusal was not committed", got)
		}

		// The kernel takes them again: a change retries one, the full resync the other.
		k.set()
		tr.UpsertEndpointSlice(slice("c", "198.18.128.97"))
		if _, err := p.Sync(ctx, false); err != nil {
			t.Fatal(err)
		}
		want["c"] = true
		if got := programmed(t, raw, all...); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after c changed: programmed %v, want %v", got, want)
		}
		if res, err := p.Sync(ctx, true); err != nil || res.Repairs != 0 {
			t.Fatalf("full resync: repairs %d, err %v; want no drift, no failure", res.Repairs, err)
		}
		want["bad"] = true
		if got := programmed(t, raw, all...); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("after the full resync: programmed %v, want %v", got, want)
		}
		matchesModel(t, raw, tr)
		if got := rj.take(); got != "c accepted, bad accepted" {
			t.Errorf("rejections reported: %q, want both accepted again", got)
		}
		if _, failures, _, _ := rec.get(); failures != 0 {
			t.Errorf("%d syncs reported failed; a refused Service must not fail the sync", failures)
		}
	})
}

// TestRefusedBaseLayoutFailsTheSync: a refused op of the base layout cannot be isolated.
func TestRefusedBaseLayoutFailsTheSync(t *testing.T) {
	f := nft.NewFake()
	f.RefuseOp = func(op nft.Op) syscall.Errno {
		if c, ok := op.Object.(*nft.Chain); ok && c.Name == ruleset.ChainServices {
			return syscall.EPERM
		}
		return 0
	}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	addService(tr, "a", 0)
	if _, err := newProxier(t, f, tr, nil).Sync(context.Background(), true); err == nil {
		t.Fatal("sync succeeded although the kernel refused the base layout")
	}
	if s := tr.Snapshot().Services[model.ServiceKey{Namespace: "default", Name: "a"}]; s == nil || s.Rejected != nil {
		t.Errorf("a Service was rejected for the base layout's refusal: %+v", s)
	}
}

// TestManyRefusalsConverge: more refused Services than one sync takes out. The first sync fails
// at the bound; the next goes on from there and succeeds; a full resync tries every refused
// Service again without failing on the bound.
func TestManyRefusalsConverge(t *testing.T) {
	k := refuse(nft.NewFake())
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	bad, names := addBadServices(tr, maxRefusals+3)
	k.set(bad...)
	p := newProxier(t, k, tr, nil)
	ctx := context.Background()
	if _, err := p.Sync(ctx, true); err == nil {
		t.Fatalf("first sync succeeded; want it to stop at %d refusals", maxRefusals)
	}
	for round, full := range []bool{true, true, true} {
		if _, err := p.Sync(ctx, full); err != nil {
			t.Fatalf("sync %d after the bound: %v", round+2, err)
		}
		got := programmed(t, k, names...)
		for _, n := range names {
			if got[n] != (n == "good") {
				t.Fatalf("sync %d: programmed %v; want only good", round+2, got)
			}
		}
	}
	for _, n := range bad {
		if s := tr.Service(model.ServiceKey{Namespace: "default", Name: n}); s == nil || s.Rejected == nil || s.Rejected.Reason != model.ReasonKernelRefused {
			t.Fatalf("%s = %+v; want rejected with %s", n, s, model.ReasonKernelRefused)
		}
	}
}

// TestDriftIsNotBlamedOnAService: after someone deleted our table (drift), a partial sync's ops
// on a changed Service are refused (its chain is gone). That is not the Service's fault: the
// sync reads the kernel back, repairs everything and rejects nobody.
func TestDriftIsNotBlamedOnAService(t *testing.T) {
	kernels(t, func(t *testing.T, k nft.Interface) {
		rj := &rejections{}
		tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard(), OnRejection: rj.on})
		for i, n := range []string{"a", "b"} {
			addService(tr, n, i)
		}
		p := newProxier(t, k, tr, nil)
		ctx := context.Background()
		if _, err := p.Sync(ctx, true); err != nil {
			t.Fatal(err)
		}
		drift := nft.NewTransaction(table4)
		drift.Delete(&nft.TableObj{})
		if _, err := k.Apply(ctx, drift); err != nil {
			t.Fatalf("delete the table behind the daemon's back: %v", err)
		}
		tr.UpsertEndpointSlice(slice("a", "198.18.128.50"))
		res, err := p.Sync(ctx, false)
		if err != nil {
			t.Fatalf("sync after drift: %v", err)
		}
		if got := rj.take(); got != "" {
			t.Errorf("rejections after drift: %q, want none", got)
		}
		if !res.Full || res.Repairs == 0 {
			t.Errorf("sync after drift: full=%v repairs=%d; want a full sync that repaired", res.Full, res.Repairs)
		}
		if got := programmed(t, k, "a", "b"); !got["a"] || !got["b"] {
			t.Errorf("after the repair: programmed %v, want both", got)
		}
	})
}

// counting counts transactions.
type counting struct {
	nft.Interface
	applies int
}

func (c *counting) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	c.applies++
	return c.Interface.Apply(ctx, tx)
}

// TestKernelTakesOutEveryRefusedServiceInOneRound: the kernel processes the whole batch and
// reports every refused message, so Services refused together are taken out together: more of
// them than the round bound, in one sync of two transactions. The refused Services have chains
// of their own (a port range): each rule is a message of its own. (Elements of one set
// travel in one message, and the kernel stops that message at its first refused element: a
// shared-mode Service whose only refused op is an element is reported alone per message.)
func TestKernelTakesOutEveryRefusedServiceInOneRound(t *testing.T) {
	ns := netns.New(t, "nftp-iso")
	raw, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	k := refuse(raw)
	c := &counting{Interface: k}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	bad, names := addBadServices(tr, maxRefusals+3, portRange)
	k.set(bad...)
	if _, err := newProxier(t, c, tr, nil).Sync(context.Background(), true); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if c.applies != 2 {
		t.Errorf("%d transactions, want 2: the refused one and the one without every refused Service", c.applies)
	}
	got := programmed(t, raw, names...)
	for _, n := range names {
		if got[n] != (n == "good") {
			t.Fatalf("programmed %v; want only good", got)
		}
	}
	for _, n := range bad {
		if s := tr.Service(model.ServiceKey{Namespace: "default", Name: n}); s == nil || s.Rejected == nil ||
			s.Rejected.Reason != model.ReasonKernelRefused || !strings.Contains(s.Rejected.Message, "/"+n+"/") {
			t.Fatalf("%s = %+v; want rejected with %s quoting its own op", n, s, model.ReasonKernelRefused)
		}
	}
	matchesModel(t, raw, tr)
}

// addBadServices adds "good" and n Services "bad-0".. to tr, the bad ones changed by mods; it
// returns the bad names and all names.
func addBadServices(tr *model.Tracker, n int, mods ...func(*corev1.Service)) (bad, names []string) {
	for i := 0; i < n; i++ {
		bad = append(bad, fmt.Sprintf("bad-%d", i))
	}
	for i, name := range append([]string{"good"}, bad...) {
		svc := service(name, fmt.Sprintf("198.19.0.%d", 10+i))
		if name != "good" {
			for _, m := range mods {
				m(svc)
			}
		}
		tr.UpsertService(svc)
		tr.UpsertEndpointSlice(slice(name, fmt.Sprintf("198.18.128.%d", 10+i)))
		names = append(names, name)
	}
	return bad, names
}

// affinity gives a Service ClientIP affinity (shared mode in an ip table, like a port without).
func affinity(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }

// portRange makes the Service's port "http" the range 80-81: it gets chains of its own (its
// DNAT keeps the port, which the shared endpoint maps cannot say).
func portRange(s *corev1.Service) {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[annotation.PortRangesKey] = "http=80-81"
	s.Spec.Ports[0].TargetPort = intstr.FromInt32(80)
}

// elementOf returns an op's element, whether the op carries it packed (as the reconciler sends
// its elements) or not.
func elementOf(o nft.Object) (*nft.Element, bool) {
	e, ok := nfttest.ElementOf(o)
	return &e, ok
}
