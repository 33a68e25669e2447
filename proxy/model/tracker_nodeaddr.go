package model

import (
	"net/netip"
	"slices"
	"sort"
)

// The node-address side of the Tracker: which addresses are the node's (the Node object's and
// the kernel's), and which Services name them, so that a change of the node's addresses rebuilds
// exactly the Services whose guard outcome or port claims may change.

// SetLocalAddresses records the addresses the kernel holds locally in nftproxy's network
// namespace (every interface, loopback included). With the Node object's addresses they are the
// node's addresses that the guard protects; Services on addresses that came or went are rebuilt.
func (t *Tracker) SetLocalAddresses(addrs []netip.Addr) {
	norm := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a.IsValid() {
			norm = append(norm, a.WithZone("").Unmap())
		}
	}
	t.update(func() []rejectionEvent {
		t.local = norm
		return t.refreshNodeAddrs()
	})
}

// NodeAddresses returns the node's addresses the guard uses, sorted.
func (t *Tracker) NodeAddresses() []netip.Addr {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]netip.Addr, 0, len(t.nodeAddrs))
	for a := range t.nodeAddrs {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Less(out[j]) })
	return out
}

// refreshNodeAddrs recomputes the node-address set and rebuilds the Services that name an
// address that joined or left it.
func (t *Tracker) refreshNodeAddrs() []rejectionEvent {
	next := NodeAddresses{}
	for _, a := range t.local {
		next[a] |= FromKernel
	}
	if t.nodeMdl != nil {
		for _, a := range t.nodeMdl.Addresses {
			next[a] |= FromNodeObject
		}
	}
	affected := map[ServiceKey]bool{}
	for _, set := range []struct{ a, b NodeAddresses }{{next, t.nodeAddrs}, {t.nodeAddrs, next}} {
		for a, origin := range set.a {
			if set.b[a] != origin {
				t.byAddr[a].each(func(k ServiceKey) { affected[k] = true })
			}
		}
	}
	t.nodeAddrs = next
	if len(affected) == 0 {
		return nil
	}
	keys := make([]ServiceKey, 0, len(affected))
	for k := range affected {
		keys = append(keys, k)
	}
	sortKeys(keys)
	return t.recompute(keys)
}

// indexAddrs replaces the addresses a Service is indexed under.
func (t *Tracker) indexAddrs(key ServiceKey, ts *trackedService, addrs []netip.Addr) {
	for _, a := range ts.addrs {
		if ks := t.byAddr[a]; ks != nil && ks.remove(key) {
			delete(t.byAddr, a)
		}
	}
	ts.addrs = addrs
	for _, a := range addrs {
		ks := t.byAddr[a]
		if ks == nil {
			ks = &keySet{}
			t.byAddr[a] = ks
		}
		ks.add(key)
	}
}

// keySet is the Services naming one address. Nearly every address (a cluster IP) has one: the
// first few are kept in a slice (a map per address costs more than the few keys it would
// hold), a map past fewClaimants.
type keySet struct {
	few  []ServiceKey
	many map[ServiceKey]bool
}

func (ks *keySet) add(k ServiceKey) {
	if ks.many != nil {
		ks.many[k] = true
		return
	}
	if slices.Contains(ks.few, k) {
		return
	}
	if len(ks.few) < fewClaimants {
		ks.few = append(ks.few, k)
		return
	}
	ks.many = make(map[ServiceKey]bool, len(ks.few)+1)
	for _, o := range ks.few {
		ks.many[o] = true
	}
	ks.few = nil
	ks.many[k] = true
}

// remove drops k and reports whether the set is empty.
func (ks *keySet) remove(k ServiceKey) bool {
	if ks.many != nil {
		delete(ks.many, k)
		return len(ks.many) == 0
	}
	if i := slices.Index(ks.few, k); i >= 0 {
		ks.few = slices.Delete(ks.few, i, i+1)
	}
	return len(ks.few) == 0
}

func (ks *keySet) each(fn func(ServiceKey)) {
	if ks == nil {
		return
	}
	for k := range ks.many {
		fn(k)
	}
	for _, k := range ks.few {
		fn(k)
	}
}
