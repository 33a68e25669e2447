package proxier

import (
	"context"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// Address plan: ClusterIPs in 198.19.0.0/16, pods in 198.18.128.0/24, node 198.18.1.1.

func service(name, ip string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, CreationTimestamp: metav1.Unix(1, 0)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: ip, ClusterIPs: []string{ip},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			Ports:      []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

func slice(svc string, addrs ...string) *discoveryv1.EndpointSlice {
	port, name, proto := int32(8080), "http", corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: svc + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

type recorder struct {
	mu       sync.Mutex
	syncs    int
	failures int
	full     int
	latency  []time.Duration
}

func (r *recorder) Synced(full bool, d time.Duration, res reconciler.Result, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.syncs++
	if full {
		r.full++
	}
	if err != nil {
		r.failures++
	}
}

func (r *recorder) Changed(int) {}

func (r *recorder) Programmed(l time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latency = append(r.latency, l)
}

func (r *recorder) get() (syncs, failures, full, programmed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.syncs, r.failures, r.full, len(r.latency)
}

func newProxier(t *testing.T, kernel nft.Interface, tr *model.Tracker, obs Observer) *Proxier {
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
	if err != nil {
		t.Fatal(err)
	}
	return New(tr, kernel, []*ruleset.Builder{b}, obs, logr.Discard(), time.Now)
}

var table4 = nft.Table{Family: nft.IPv4, Name: ruleset.DefaultTable}

// locked lets the test read the fake kernel while the runner writes it.
type locked struct {
	mu sync.Mutex
	k  nft.Interface
}

func (l *locked) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.k.Apply(ctx, tx)
}

func (l *locked) Dump(ctx context.Context, t nft.Table) (*nft.Ruleset, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.k.Dump(ctx, t)
}

func (l *locked) ListTables(ctx context.Context, f nft.Family) ([]string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.k.ListTables(ctx, f)
}

// endpointsOf reads, from the kernel, where the ClusterIP of a single-port Service sends new
// connections: the endpoints in the slots of its dispatch key in the shared endpoint map.
func endpointsOf(t *testing.T, k nft.Interface, pn model.PortName) []string {
	rs, err := k.Dump(context.Background(), table4)
	if err != nil {
		return nil
	}
	var out []string
	if d := dispatchOf(rs, pn); d != nil {
		for _, e := range slotsOf(rs, d) {
			out = append(out, e.Data[0].Addr.String())
		}
	}
	return out
}

// dispatchOf is the ClusterIP dispatch element of pn (its comment names the port), or nil.
func dispatchOf(rs *nft.Ruleset, pn model.PortName) *nft.Element {
	for i, e := range rs.Elements[ruleset.MapServiceIPs] {
		if e.Comment == pn.String() && e.Verdict != nil {
			return &rs.Elements[ruleset.MapServiceIPs][i]
		}
	}
	return nil
}

// slotsOf are the elements of the shared endpoint maps under the dispatch element's key.
func slotsOf(rs *nft.Ruleset, d *nft.Element) []nft.Element {
	var out []nft.Element
	for m, els := range rs.Elements {
		if !ruleset.IsEndpointMap(m, ruleset.MapEndpoints) {
			continue
		}
		for _, e := range els {
			if len(e.Key) == len(d.Key)+1 && slices.Equal(e.Key[:len(d.Key)], d.Key) {
				out = append(out, e)
			}
		}
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunnerFollowsChanges(t *testing.T) {
	fake, tr, rec, r, pn := runWeb(t, 10*time.Millisecond)

	// A burst of changes is coalesced; the final state wins.
	for i := 0; i < 20; i++ {
		tr.UpsertEndpointSlice(slice("web", "198.18.128.10", "198.18.128.11", "198.18.128.12"))
		r.Notify()
	}
	waitFor(t, "three endpoints programmed", func() bool { return len(endpointsOf(t, fake, pn)) == 3 })
	syncs, failures, full, programmed := rec.get()
	if syncs > 10 {
		t.Errorf("%d syncs for one initial change and a burst of 20, want coalescing", syncs)
	}
	if failures != 0 || full != 1 {
		t.Errorf("failures=%d full=%d, want 0 failures and exactly the initial full sync", failures, full)
	}
	if programmed == 0 {
		t.Error("no network-programming latency was reported")
	}
}

// TestRunnerPacesByCost: by default the wait between syncs follows what they cost and
// MinSyncPeriod is only its ceiling: with a ceiling of an hour, a change right after a cheap sync
// is still programmed (the fixed period used to hold it for the hour).
func TestRunnerPacesByCost(t *testing.T) {
	fake, tr, _, r, pn := runWebWith(t, RunConfig{MinSyncPeriod: time.Hour})
	tr.UpsertEndpointSlice(slice("web", "198.18.128.10", "198.18.128.11"))
	r.Notify()
	waitFor(t, "the second endpoint programmed", func() bool { return len(endpointsOf(t, fake, pn)) == 2 })
}

// TestRunnerHonoursFixedPeriod: a fixed period (the user set --min-sync-period) holds the next
// change for that period, as kube-proxy does.
func TestRunnerHonoursFixedPeriod(t *testing.T) {
	fake, tr, rec, r, pn := runWebWith(t, RunConfig{MinSyncPeriod: time.Hour, FixedSyncPeriod: true})
	tr.UpsertEndpointSlice(slice("web", "198.18.128.10", "198.18.128.11"))
	r.Notify()
	time.Sleep(200 * time.Millisecond)
	if got := len(endpointsOf(t, fake, pn)); got != 1 {
		t.Errorf("%d endpoints programmed within the fixed hour, want 1 (the change held)", got)
	}
	if syncs, _, _, _ := rec.get(); syncs != 1 {
		t.Errorf("%d syncs, want only the first within the fixed period", syncs)
	}
}

// flaky fails every Apply until healed.
type flaky struct {
	nft.Interface
	mu     sync.Mutex
	broken bool
	calls  int
}

func (f *flaky) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	f.mu.Lock()
	f.calls++
	broken := f.broken
	f.mu.Unlock()
	if broken {
		return nft.Stats{}, &nft.OpError{Index: 0, Op: "add table", Err: syscall.EMSGSIZE}
	}
	return f.Interface.Apply(ctx, tx)
}

func (f *flaky) set(broken bool) { f.mu.Lock(); f.broken = broken; f.mu.Unlock() }
func (f *flaky) n() int          { f.mu.Lock(); defer f.mu.Unlock(); return f.calls }

func TestRunnerBacksOffAndRecovers(t *testing.T) {
	k := &flaky{Interface: &locked{k: nft.NewFake()}, broken: true}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	tr.UpsertService(service("web", "198.19.0.10"))
	tr.UpsertEndpointSlice(slice("web", "198.18.128.10"))
	rec := &recorder{}
	r := NewRunner(newProxier(t, k, tr, rec), RunConfig{MinSyncPeriod: 20 * time.Millisecond, MaxBackoff: 80 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	time.Sleep(300 * time.Millisecond)
	calls := k.n()
	// 20, 40, 80, 80 ms backoff: about 5 attempts in 300 ms; a retry storm would be ~300.
	if calls < 2 || calls > 12 {
		t.Errorf("%d apply attempts in 300 ms while failing, want a handful (backoff)", calls)
	}
	k.set(false)
	pn := model.PortName{Service: model.ServiceKey{Namespace: "default", Name: "web"}, Port: "http", Protocol: model.TCP}
	waitFor(t, "recovery", func() bool { return len(endpointsOf(t, k, pn)) == 1 })
	<-r.synced
	if _, failures, _, _ := rec.get(); failures == 0 {
		t.Error("failures were not reported to the observer")
	}
}

// Until the sources are ready nothing is synced: a first sync of an empty model would remove
// what the kernel already serves.
func TestRunnerWaitsForReadySources(t *testing.T) {
	fake := &locked{k: nft.NewFake()}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	rec := &recorder{}
	var mu sync.Mutex
	ready := false
	r := NewRunner(newProxier(t, fake, tr, rec), RunConfig{MinSyncPeriod: 5 * time.Millisecond,
		Ready: func() bool { mu.Lock(); defer mu.Unlock(); return ready }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	r.Notify()
	time.Sleep(100 * time.Millisecond)
	if syncs, _, _, _ := rec.get(); syncs != 0 {
		t.Fatalf("%d syncs before the sources were ready, want 0", syncs)
	}
	tr.UpsertService(service("web", "198.19.0.10"))
	tr.UpsertEndpointSlice(slice("web", "198.18.128.10"))
	mu.Lock()
	ready = true
	mu.Unlock()
	r.Notify()
	<-r.synced
	if syncs, _, full, _ := rec.get(); syncs != 1 || full != 1 {
		t.Errorf("after ready: %d syncs (%d full), want exactly one full sync with the whole model", syncs, full)
	}
}

// TestRunnerRepairsSuspectedDrift: with the default hour between full resyncs, a suspected
// drift (what the nft.Watcher reports) makes the next sync read the kernel back and repair it.
func TestRunnerRepairsSuspectedDrift(t *testing.T) {
	fake, _, rec, r, pn := runWeb(t, 5*time.Millisecond)

	// Someone else deletes our table (nft flush ruleset).
	tx := nft.NewTransaction(table4)
	tx.Delete(&nft.TableObj{})
	if _, err := fake.Apply(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	// A plain Notify trusts what was applied: nothing to send, nothing repaired.
	r.Notify()
	r.SuspectDrift()
	waitFor(t, "the Service programmed again", func() bool { return len(endpointsOf(t, fake, pn)) == 1 })
	if _, failures, full, _ := rec.get(); full != 2 || failures != 0 {
		t.Errorf("full syncs %d, failures %d: want the initial full sync and one repair", full, failures)
	}
	// The same again at once: this verification is spaced out after the last repair, and
	// must still come.
	if _, err := fake.Apply(context.Background(), tx); err != nil {
		t.Fatal(err)
	}
	r.SuspectDrift()
	waitFor(t, "the Service programmed again after a second drift", func() bool { return len(endpointsOf(t, fake, pn)) == 1 })
}

// TestDriftFightSpacesRepairs: a repair after a quiet spell runs at once; when another writer
// keeps undoing them, each further verification waits twice as long after the last repair, up
// to the cap; a verification that finds nothing, or a quiet spell, ends the streak.
func TestDriftFightSpacesRepairs(t *testing.T) {
	const minD, maxD = time.Second, 8 * time.Second
	t0 := time.Unix(1_800_000_000, 0)
	var d driftFight
	if d.due(t0, minD, maxD) {
		t.Fatal("due without a suspicion")
	}
	// (suspected at, repairs found, want due at once, wait before due)
	steps := []struct {
		at      time.Duration
		repairs int
		now     bool
		wait    time.Duration
	}{
		{0, 5, true, 0},
		{100 * time.Millisecond, 5, false, 2 * time.Second},
		{2100 * time.Millisecond, 5, false, 4 * time.Second},
		{6100 * time.Millisecond, 5, false, 8 * time.Second},
		{14100 * time.Millisecond, 5, false, 8 * time.Second}, // capped
		{22100 * time.Millisecond, 0, false, 8 * time.Second}, // found nothing: streak ends
		{22200 * time.Millisecond, 1, true, 0},
		{40 * time.Second, 1, true, 0}, // a quiet spell longer than the cap: at once
	}
	last := t0
	for i, st := range steps {
		now := t0.Add(st.at)
		d.suspect(now, maxD)
		if got := d.due(now, minD, maxD); got != st.now {
			t.Fatalf("step %d: due at once = %v, want %v (streak %d)", i, got, st.now, d.streak)
		}
		if !st.now {
			if got, want := d.wake(now, minD, maxD), last.Add(st.wait).Sub(now); got != want {
				t.Fatalf("step %d: wakes in %v, want %v", i, got, want)
			}
			now = last.Add(st.wait)
			if !d.due(now, minD, maxD) {
				t.Fatalf("step %d: not due at %v after the last repair", i, st.wait)
			}
		}
		d.repaired(st.repairs, now)
		if st.repairs > 0 {
			last = now
		}
	}
}

// runWeb starts a Runner (stopped at the end of the test) over a fake kernel with one Service
// "web" and one endpoint, and waits until that endpoint is programmed and the sync reported.
func runWeb(t *testing.T, minSync time.Duration) (*locked, *model.Tracker, *recorder, *Runner, model.PortName) {
	t.Helper()
	return runWebWith(t, RunConfig{MinSyncPeriod: minSync})
}

// runWebWith is runWeb with the whole RunConfig.
func runWebWith(t *testing.T, cfg RunConfig) (*locked, *model.Tracker, *recorder, *Runner, model.PortName) {
	t.Helper()
	fake := &locked{k: nft.NewFake()}
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	rec := &recorder{}
	r := NewRunner(newProxier(t, fake, tr, rec), cfg)
	// The web Service is in the model before the runner starts: its first sync must carry it
	// (with a fixed hour between syncs, a first sync of an empty model would hold it back).
	tr.UpsertService(service("web", "198.19.0.10"))
	tr.UpsertEndpointSlice(slice("web", "198.18.128.10"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	r.Notify()
	pn := model.PortName{Service: model.ServiceKey{Namespace: "default", Name: "web"}, Port: "http", Protocol: model.TCP}
	waitFor(t, "one endpoint programmed", func() bool { return len(endpointsOf(t, fake, pn)) == 1 })
	<-r.synced
	return fake, tr, rec, r, pn
}
