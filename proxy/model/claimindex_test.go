package model

import (
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
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
		var out []claim
		ix[k].each(func(s ServiceKey, cs []claim) {
			if s == svc {
				out = cs
			}
		})
		return out
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
