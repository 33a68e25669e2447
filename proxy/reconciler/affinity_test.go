package reconciler_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/test/netns"
)

// affinityFragments are a base layout with a dynamic "client . frontend -> endpoint" map and a
// Service whose chain records its endpoints (eps, 198.18.128.x:8080) into it.
func affinityBase() fragment.Fragment {
	a := nft.TypeIPv4Addr
	return fragment.Fragment{Sets: []nft.Set{{Name: "affinity", Key: []nft.Type{a, a, nft.TypeInetProto, nft.TypeInetService},
		Data: []nft.Type{a, nft.TypeInetService}, Dynamic: true, HasTimeout: true, Size: 1024}}}
}

func affinityService(eps ...string) fragment.Fragment {
	key := []nft.Field{nft.FieldSaddr, nft.FieldDaddr, nft.FieldL4Proto, nft.FieldDport}
	var rs []nft.Rule
	for i, ep := range eps {
		a := netip.MustParseAddr(ep)
		var ex []nft.Expr
		if n := len(eps) - i; n > 1 {
			ex = append(ex, nft.NumgenMatch{Modulus: uint32(n)})
		}
		ex = append(ex, nft.Cmp{Field: nft.FieldL4Proto, Value: nft.Proto(unix.IPPROTO_TCP)},
			nft.SetUpdate{Fields: key, Set: "affinity", Timeout: time.Hour, Data: []nft.Value{nft.Addr(a), nft.Port(8080)}},
			nft.DNAT{Addr: a, Port: 8080})
		rs = append(rs, nft.Rule{Chain: "svc-web", Exprs: ex})
	}
	return fragment.Fragment{Chains: []fragment.ChainDef{{Chain: nft.Chain{Name: "svc-web"}, Rules: rs}}}
}

// affinityDeclared is affinityService whose endpoints are recorded after DNAT from the packet
// (a rule with data fields, in a chain of the base layout): the fragment declares them instead.
func affinityDeclared(eps ...string) fragment.Fragment {
	var f fragment.Fragment
	for _, ep := range eps {
		f.Recorded = append(f.Recorded, fragment.Recorded{Set: "affinity", Data: []nft.Value{nft.Addr(netip.MustParseAddr(ep)), nft.Port(8080)}})
	}
	return f
}

// entry is what the packet path would have recorded: client -> ClusterIP:80 -> ep.
func entry(client, ep string) *nft.Element {
	return &nft.Element{Set: "affinity", Timeout: time.Hour,
		Key:  []nft.Value{nft.Addr(netip.MustParseAddr(client)), nft.Addr(netip.MustParseAddr("198.19.0.10")), nft.Proto(unix.IPPROTO_TCP), nft.Port(80)},
		Data: []nft.Value{nft.Addr(netip.MustParseAddr(ep)), nft.Port(8080)}}
}

// TestAffinityEntriesOfRemovedEndpoints: after a sync that removes an endpoint of an affinity
// port, the entries of the dynamic map that send clients to it are deleted (they would DNAT to
// a removed endpoint until they expire), the others kept; a sync that removes nothing reads
// nothing back; an entry holding the refresh's all-zero data goes too; and a full resync (a
// restart) prunes what was lost while nobody watched. The Fake and the kernel alike; endpoints
// recorded by rules and declared by the fragment alike.
func TestAffinityEntriesOfRemovedEndpoints(t *testing.T) {
	for _, name := range []string{"fake", "kernel", "fake-declared", "kernel-declared"} {
		affinityService := affinityService
		if strings.HasSuffix(name, "-declared") {
			affinityService = affinityDeclared
		}
		t.Run(name, func(t *testing.T) {
			var k nft.Interface = nft.NewFake()
			if strings.HasPrefix(name, "kernel") {
				ns := netns.New(t, "reconaff")
				kk, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { kk.Close() })
				k = kk
			}
			ctx := context.Background()
			tb := nft.Table{Family: nft.IPv4, Name: "nftproxy"}
			web := reconciler.Owner{Namespace: "default", Name: "web"}
			r := reconciler.New(k, logr.Discard(), time.Now, tb)
			r.Set(tb, reconciler.Owner{}, affinityBase())
			r.Set(tb, web, affinityService("198.18.128.1", "198.18.128.2", "198.18.128.3"))
			if _, err := r.Commit(ctx, false); err != nil {
				t.Fatal(err)
			}
			// What the packet path recorded (an element added from here stands for it).
			seed := nft.NewTransaction(tb)
			seed.Add(entry("198.18.1.1", "198.18.128.1"))
			seed.Add(entry("198.18.1.2", "198.18.128.2"))
			seed.Add(entry("198.18.1.3", "198.18.128.3"))
			seed.Add(entry("198.18.1.4", "198.18.128.2"))
			if _, err := k.Apply(ctx, seed); err != nil {
				t.Fatal(err)
			}
			clients := func() []string {
				els, err := k.(nft.SetElementsDumper).DumpSetElements(ctx, tb, "affinity")
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, e := range els {
					out = append(out, e.Key[0].Addr.String()+">"+e.Data[0].Addr.String())
				}
				slices.Sort(out)
				return out
			}

			r.Set(tb, web, affinityService("198.18.128.1", "198.18.128.3"))
			res, err := r.Commit(ctx, false)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"198.18.1.1>198.18.128.1", "198.18.1.3>198.18.128.3"}
			if got := clients(); !slices.Equal(got, want) || res.AffinityPruned != 2 {
				t.Fatalf("after removing 198.18.128.2: entries %v (pruned %d), want %v (pruned 2)", got, res.AffinityPruned, want)
			}

			// An endpoint added back and one more: nothing lost, nothing read back.
			seed = nft.NewTransaction(tb)
			seed.Add(entry("198.18.1.5", "198.18.128.3"))
			zero := entry("198.18.1.6", "0.0.0.0")
			zero.Data[1] = nft.Port(0)
			seed.Add(zero)
			if _, err := k.Apply(ctx, seed); err != nil {
				t.Fatal(err)
			}
			r.Set(tb, web, affinityService("198.18.128.1", "198.18.128.2", "198.18.128.3"))
			if res, err := r.Commit(ctx, false); err != nil || res.AffinityPruned != 0 {
				t.Fatalf("adding an endpoint: pruned %d (%v), want 0", res.AffinityPruned, err)
			}

			// A restart with the same model: the packet path's entries are not drift.
			before := clients()
			r = reconciler.New(k, logr.Discard(), time.Now, tb)
			r.Set(tb, reconciler.Owner{}, affinityBase())
			r.Set(tb, web, affinityService("198.18.128.1", "198.18.128.2", "198.18.128.3"))
			res, err = r.Commit(ctx, true)
			if err != nil {
				t.Fatal(err)
			}
			want = slices.DeleteFunc(before, func(s string) bool { return s == "198.18.1.6>0.0.0.0" })
			if got := clients(); res.Ops != 0 || res.Repairs != 0 || !slices.Equal(got, want) {
				t.Fatalf("a restart with the same model: %d ops, %d repairs, entries %v; want 0, 0, %v (only the all-zero entry gone)",
					res.Ops, res.Repairs, got, want)
			}

			// A restart: a new reconciler, a full Commit, a model without 198.18.128.3.
			r = reconciler.New(k, logr.Discard(), time.Now, tb)
			r.Set(tb, reconciler.Owner{}, affinityBase())
			r.Set(tb, web, affinityService("198.18.128.1", "198.18.128.2"))
			if _, err := r.Commit(ctx, true); err != nil {
				t.Fatal(err)
			}
			want = []string{"198.18.1.1>198.18.128.1"}
			if got := clients(); !slices.Equal(got, want) {
				t.Fatalf("after a restart without 198.18.128.3: entries %v, want %v (the all-zero entry gone too)", got, want)
			}
		})
	}
}

// doubling lists every element of a set twice, as a kernel dump may while the set's hash table
// is being resized.
type doubling struct {
	*nft.Fake
	applies *int
}

func (d doubling) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	*d.applies++
	return d.Fake.Apply(ctx, tx)
}

func (d doubling) DumpSetElements(ctx context.Context, t nft.Table, set string) ([]nft.Element, error) {
	els, err := d.Fake.DumpSetElements(ctx, t, set)
	return append(els, els...), err
}

// TestAffinityPruneDumpListsTwice: an element a read-back lists twice is deleted once, in one
// transaction (a second delete of it would make the kernel refuse the whole batch).
func TestAffinityPruneDumpListsTwice(t *testing.T) {
	ctx := context.Background()
	applies := 0
	k := doubling{nft.NewFake(), &applies}
	tb := nft.Table{Family: nft.IPv4, Name: "nftproxy"}
	web := reconciler.Owner{Namespace: "default", Name: "web"}
	r := reconciler.New(k, logr.Discard(), time.Now, tb)
	r.Set(tb, reconciler.Owner{}, affinityBase())
	r.Set(tb, web, affinityService("198.18.128.1", "198.18.128.2"))
	if _, err := r.Commit(ctx, false); err != nil {
		t.Fatal(err)
	}
	seed := nft.NewTransaction(tb)
	seed.Add(entry("198.18.1.1", "198.18.128.1"))
	seed.Add(entry("198.18.1.2", "198.18.128.2"))
	if _, err := k.Apply(ctx, seed); err != nil {
		t.Fatal(err)
	}
	r.Set(tb, web, affinityService("198.18.128.1"))
	applies = 0
	res, err := r.Commit(ctx, false)
	if err != nil || res.AffinityPruned != 1 || applies != 2 {
		t.Fatalf("after removing 198.18.128.2: pruned %d (%v) in %d transactions, want 1 in 2 (the sync's, the prune's)", res.AffinityPruned, err, applies)
	}
}

// failingPrune fails the prune's transactions (every Apply after the first of a Commit) while
// fail is set.
type failingPrune struct {
	*nft.Fake
	fail    bool
	applies int
}

func (f *failingPrune) Apply(ctx context.Context, tx *nft.Transaction) (nft.Stats, error) {
	f.applies++
	if f.fail && f.applies > 1 {
		return nft.Stats{}, errors.New("netlink: no buffer space available")
	}
	return f.Fake.Apply(ctx, tx)
}

// TestAffinityPruneFailureReported: a prune that fails is reported in the Result by family (the
// sync itself committed) and done after the next Commit, which reports no failure.
func TestAffinityPruneFailureReported(t *testing.T) {
	ctx := context.Background()
	k := &failingPrune{Fake: nft.NewFake()}
	tb := nft.Table{Family: nft.IPv4, Name: "nftproxy"}
	web := reconciler.Owner{Namespace: "default", Name: "web"}
	r := reconciler.New(k, logr.Discard(), time.Now, tb)
	r.Set(tb, reconciler.Owner{}, affinityBase())
	r.Set(tb, web, affinityService("198.18.128.1", "198.18.128.2"))
	if _, err := r.Commit(ctx, false); err != nil {
		t.Fatal(err)
	}
	seed := nft.NewTransaction(tb)
	seed.Add(entry("198.18.1.2", "198.18.128.2"))
	if _, err := k.Fake.Apply(ctx, seed); err != nil {
		t.Fatal(err)
	}
	r.Set(tb, web, affinityService("198.18.128.1"))
	k.fail, k.applies = true, 0
	res, err := r.Commit(ctx, false)
	if err != nil || !slices.Equal(res.CleanupFailed, []nft.Family{nft.IPv4}) || res.AffinityPruned != 0 {
		t.Fatalf("commit with a failing prune: err %v, cleanup failed %v, pruned %d; want no error, [IPv4], 0", err, res.CleanupFailed, res.AffinityPruned)
	}
	k.fail = false
	res, err = r.Commit(ctx, false)
	if err != nil || len(res.CleanupFailed) != 0 || res.AffinityPruned != 1 {
		t.Fatalf("next commit: err %v, cleanup failed %v, pruned %d; want no error, none, 1", err, res.CleanupFailed, res.AffinityPruned)
	}
}
