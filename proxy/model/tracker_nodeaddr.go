package model

import (
	"net/netip"
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
				for k := range t.byAddr[a] {
					affected[k] = true
				}
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
		if m := t.byAddr[a]; m != nil {
			delete(m, key)
			if len(m) == 0 {
				delete(t.byAddr, a)
			}
		}
	}
	ts.addrs = addrs
	for _, a := range addrs {
		m := t.byAddr[a]
		if m == nil {
			m = map[ServiceKey]bool{}
			t.byAddr[a] = m
		}
		m[key] = true
	}
}
