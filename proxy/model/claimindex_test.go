package model

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestClaimIndex: the Services claiming ports at one key are found, whether few (kept in a
// slice) or many (a map), as Services come and go across that threshold.
func TestClaimIndex(t *testing.T) {
	key := claimKey{netip.MustParseAddr("198.19.0.1"), TCP}
	other := claimKey{netip.MustParseAddr("198.19.0.2"), TCP}
	svc := func(i int) ServiceKey { return ServiceKey{Namespace: "ns", Name: fmt.Sprintf("s%d", i)} }
	port := func(k claimKey, p uint16) claim { return claim{key: k, lo: p, hi: p} }
	overlapping := func(ix claimIndex, c claim) []string {
		var out []string
		ix.overlapping(ServiceKey{Name: "self"}, []claim{c}, func(k ServiceKey) { out = append(out, k.Name) })
		sort.Strings(out)
		return out
	}
	for _, n := range []int{1, fewClaimants, fewClaimants + 3} {
		t.Run(fmt.Sprintf("%d Services", n), func(t *testing.T) {
			ix := claimIndex{}
			for i := 0; i < n; i++ {
				// Each claims port 1000+i, and port 80 on every second one; s0 claims elsewhere too.
				cs := []claim{port(key, uint16(1000+i))}
				if i%2 == 0 {
					cs = append(cs, port(key, 80))
				}
				if i == 0 {
					cs = append(cs, port(other, 80))
				}
				ix.add(svc(i), cs)
			}
			var want80 []string
			for i := 0; i < n; i += 2 {
				want80 = append(want80, svc(i).Name)
			}
			sort.Strings(want80)
			if got := overlapping(ix, port(key, 80)); !reflect.DeepEqual(got, want80) {
				t.Errorf("port 80: %v, want %v", got, want80)
			}
			if got, want := overlapping(ix, port(key, uint16(1000+n-1))), []string{svc(n - 1).Name}; !reflect.DeepEqual(got, want) {
				t.Errorf("port %d: %v, want %v", 1000+n-1, got, want)
			}
			ix.remove(svc(0), []claim{port(key, 1000), port(key, 80), port(other, 80)})
			if got := overlapping(ix, port(other, 80)); len(got) != 0 {
				t.Errorf("after s0 left, port 80 elsewhere: %v, want none", got)
			}
			if got := overlapping(ix, port(key, 80)); !reflect.DeepEqual(got, want80[1:]) && !(len(got) == 0 && len(want80) == 1) {
				t.Errorf("after s0 left, port 80: %v, want %v", got, want80[1:])
			}
			for i := 1; i < n; i++ {
				ix.remove(svc(i), []claim{port(key, uint16(1000+i))})
			}
			if len(ix) != 0 {
				t.Errorf("after every Service left, %d keys remain", len(ix))
			}
		})
	}
}

// TestClaimIndexShares: a key lists exactly the claims a Service makes there, in their order,
// whether they are consecutive in the Service's list (then the index holds that part of the
// list itself) or not (then a copy), and never writes into the Service's list.
func TestClaimIndexShares(t *testing.T) {
	a := claimKey{netip.MustParseAddr("198.19.0.1"), TCP}
	b := claimKey{netip.MustParseAddr("198.19.0.2"), TCP}
	svc := ServiceKey{Namespace: "ns", Name: "s"}
	claims := []claim{{key: a, lo: 80, hi: 80}, {key: b, lo: 81, hi: 81}, {key: b, lo: 82, hi: 82}, {key: a, lo: 83, hi: 83}}
	orig := slices.Clone(claims)
	ix := claimIndex{}
	ix.add(svc, claims)
	at := func(k claimKey) []claim {
		for _, sc := range ix[k].few {
			if sc.svc == svc {
				return sc.claims
			}
		}
		return nil
	}
	if got, want := at(a), []claim{claims[0], claims[3]}; !reflect.DeepEqual(got, want) {
		t.Errorf("claims at a: %v, want %v", got, want)
	}
	if got := at(b); !reflect.DeepEqual(got, claims[1:3]) || &got[0] != &claims[1] {
		t.Errorf("claims at b: %v (shared: %v), want %v, shared", got, len(got) > 0 && &got[0] == &claims[1], claims[1:3])
	}
	ix.add(svc, []claim{{key: b, lo: 90, hi: 90}})
	if got := at(b); len(got) != 3 || got[2].lo != 90 {
		t.Errorf("claims at b after another add: %v, want 81, 82, 90", got)
	}
	if !reflect.DeepEqual(claims, orig) {
		t.Errorf("the Service's list became %v, want %v (written to)", claims, orig)
	}
}

// TestKeySet: the Services indexed under one address, few (a slice) or many (a map), added
// twice, removed, and the set reported empty once the last one leaves.
func TestKeySet(t *testing.T) {
	for _, n := range []int{1, fewClaimants, fewClaimants + 3} {
		t.Run(fmt.Sprintf("%d Services", n), func(t *testing.T) {
			ks := &keySet{}
			var want []string
			for i := 0; i < n; i++ {
				k := ServiceKey{Namespace: "ns", Name: fmt.Sprintf("s%d", i)}
				ks.add(k)
				ks.add(k)
				want = append(want, k.Name)
			}
			members := func() []string {
				var out []string
				ks.each(func(k ServiceKey) { out = append(out, k.Name) })
				sort.Strings(out)
				return out
			}
			sort.Strings(want)
			if got := members(); !reflect.DeepEqual(got, want) {
				t.Errorf("members %v, want %v", got, want)
			}
			for i := 0; i < n; i++ {
				empty := ks.remove(ServiceKey{Namespace: "ns", Name: fmt.Sprintf("s%d", i)})
				if empty != (i == n-1) {
					t.Errorf("after removing s%d of %d: empty = %v", i, n, empty)
				}
			}
			if got := members(); len(got) != 0 {
				t.Errorf("members after removing all: %v", got)
			}
		})
	}
}

// TestClaimIndexAgainstScan: after random adds, additions to a Service's claims and removals,
// every lookup finds what a scan of all claims finds: each overlapping Service once per claim
// (overlapping), and the same winner and winning claim (conflicts). Claims are single ports,
// ranges narrow and wide, all ports, and the same claim twice, at a key with few Services and
// at keys with many (indexed by port).
func TestClaimIndexAgainstScan(t *testing.T) {
	keys := []claimKey{{netip.Addr{}, TCP}, {netip.MustParseAddr("198.19.0.1"), TCP}}
	for _, tc := range []struct {
		name     string
		services int
		span     int // claims start in 1000..1000+span-1
		maxWidth int // of a range claim
		ops      int
	}{
		{name: "few Services", services: fewClaimants - 1, span: 8, maxWidth: 4, ops: 200},
		{name: "many Services, single ports", services: 60, span: 80, maxWidth: 1, ops: 600},
		{name: "many Services, ranges", services: 60, span: 64, maxWidth: 3 * narrowPorts, ops: 600},
		{name: "many Services, crowded", services: 40, span: 6, maxWidth: narrowPorts + 1, ops: 600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(len(tc.name))))
			newClaim := func() claim {
				c := claim{key: keys[rng.IntN(len(keys))], lo: uint16(1000 + rng.IntN(tc.span)), port: fmt.Sprint(rng.IntN(100))}
				switch r := rng.IntN(20); {
				case r == 0:
					c.lo, c.hi = 1, 65535
				case r < 8:
					c.hi = c.lo + uint16(rng.IntN(tc.maxWidth))
				default:
					c.hi = c.lo
				}
				if rng.IntN(2) == 0 {
					c.addr = c.key.addr
				}
				return c
			}
			newClaims := func() []claim {
				out := make([]claim, 1+rng.IntN(4))
				for i := range out {
					out[i] = newClaim()
					if i > 0 && rng.IntN(5) == 0 {
						out[i] = out[rng.IntN(i)] // the same claim twice
					}
				}
				return out
			}
			svc := func(i int) ServiceKey { return ServiceKey{Namespace: "ns", Name: fmt.Sprintf("s%d", i)} }
			ix := claimIndex{}
			model := map[ServiceKey][]claim{}
			for op := 0; op < tc.ops; op++ {
				k := svc(rng.IntN(tc.services))
				have, ok := model[k]
				switch {
				case !ok:
					model[k] = newClaims()
					ix.add(k, model[k])
				case rng.IntN(3) == 0:
					more := newClaims()
					ix.add(k, more)
					model[k] = slices.Concat(have, more)
				default:
					ix.remove(k, have)
					delete(model, k)
				}
				for range 5 {
					q, self := newClaim(), svc(rng.IntN(tc.services))
					var got []string
					ix.overlapping(self, []claim{q}, func(o ServiceKey) { got = append(got, o.Name) })
					sort.Strings(got)
					if want := overlappingByScan(model, self, q); !slices.Equal(got, want) {
						t.Fatalf("op %d: Services overlapping %s, %s (not %s): %v, want %v", op, q.key, q.portsText(), self.Name, got, want)
					}
					r := ranked{key: self, claims: newClaims()}
					if got, want := conflicts(r, ix), conflictsByScan(model, r); !reflect.DeepEqual(got, want) {
						t.Fatalf("op %d: conflicts of %s: %s, want %s", op, claimsText(r.claims), lostText(got), lostText(want))
					}
				}
				checkPortIndex(t, ix)
			}
			for k, have := range model {
				ix.remove(k, have)
			}
			if len(ix) != 0 {
				t.Errorf("after every Service left, %d keys remain", len(ix))
			}
		})
	}
}

// overlappingByScan lists, sorted, the Services other than self with a claim overlapping q.
func overlappingByScan(model map[ServiceKey][]claim, self ServiceKey, q claim) []string {
	var out []string
	for k, claims := range model {
		if k != self && slices.ContainsFunc(claims, q.overlaps) {
			out = append(out, k.Name)
		}
	}
	sort.Strings(out)
	return out
}

// conflictsByScan is conflicts over a scan of all claims: the winner is the overlapping Service
// with the smallest key, with its first overlapping claim.
func conflictsByScan(model map[ServiceKey][]claim, r ranked) []lost {
	keys := make([]ServiceKey, 0, len(model))
	for k := range model {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	var out []lost
	for _, c := range r.claims {
		for _, k := range keys {
			if i := slices.IndexFunc(model[k], c.overlaps); i >= 0 {
				out = append(out, lost{claim: c, winner: k, theirs: model[k][i]})
				if !c.addr.IsValid() {
					return out
				}
				break
			}
		}
	}
	return out
}

// checkPortIndex: at every key indexed by port, each port lists exactly the Services with a
// narrow claim covering it, and the wide Services are exactly those with a wider claim; nothing
// stays behind for a Service that left.
func checkPortIndex(t *testing.T, ix claimIndex) {
	for key, cl := range ix {
		if cl.many == nil {
			continue
		}
		wantPorts, wantWide := map[uint16][]string{}, []string(nil)
		for k, claims := range cl.many.claims {
			for _, c := range claims {
				if !c.narrow() {
					if !slices.Contains(wantWide, k.Name) {
						wantWide = append(wantWide, k.Name)
					}
					continue
				}
				for p := int(c.lo); p <= int(c.hi); p++ {
					if !slices.Contains(wantPorts[uint16(p)], k.Name) {
						wantPorts[uint16(p)] = append(wantPorts[uint16(p)], k.Name)
					}
				}
			}
		}
		gotPorts := map[uint16][]string{}
		for p, k := range cl.many.byPort {
			gotPorts[p] = append(gotPorts[p], k.Name)
		}
		for p, ks := range cl.many.shared {
			if _, ok := cl.many.byPort[p]; !ok || len(ks) == 0 {
				t.Fatalf("%s: port %d lists other Services %v, but no first one (%v) or none", key, p, ks, ok)
			}
			for _, k := range ks {
				gotPorts[p] = append(gotPorts[p], k.Name)
			}
		}
		var gotWide []string
		cl.many.wide.each(func(k ServiceKey) { gotWide = append(gotWide, k.Name) })
		for _, m := range []map[uint16][]string{wantPorts, gotPorts} {
			for _, names := range m {
				sort.Strings(names)
			}
		}
		sort.Strings(wantWide)
		sort.Strings(gotWide)
		if !reflect.DeepEqual(gotPorts, wantPorts) || !slices.Equal(gotWide, wantWide) {
			t.Fatalf("%s: ports %v, wide %v; want ports %v, wide %v", key, gotPorts, gotWide, wantPorts, wantWide)
		}
	}
}

func claimsText(claims []claim) string {
	var out []string
	for _, c := range claims {
		out = append(out, fmt.Sprintf("%s %s (addr %v)", c.key, c.portsText(), c.addr))
	}
	return strings.Join(out, "; ")
}

func lostText(ls []lost) string {
	var out []string
	for _, l := range ls {
		out = append(out, l.text())
	}
	return strings.Join(out, "; ")
}
