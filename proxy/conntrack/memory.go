package conntrack

import "github.com/nftproxy/nftproxy/proxy/model"

// memory remembers each Service's model as of the last successful sync, so that the Hook can
// hand Targets before/after pairs while the proxier hands it only what each sync committed.
// Only Services with UDP ports are kept (the others never need cleaning). Not safe for
// concurrent use; the Hook runs on the proxier's sync goroutine.
type memory struct {
	synced map[model.ServiceKey]*model.Service
}

// newMemory returns an empty memory: every Service committed first is new, so the first sync
// cleans every UDP frontend (flows left from before a restart).
func newMemory() *memory {
	return &memory{synced: map[model.ServiceKey]*model.Service{}}
}

// changes returns the before/after pairs of committed (each Service a sync programmed as its
// model, nil: removed), in no particular order, and makes those models the remembered ones.
// Models are shared with the tracker and never modified, so only the pointers are kept.
func (m *memory) changes(committed map[model.ServiceKey]*model.Service) []Change {
	var out []Change
	for k, now := range committed {
		before := m.synced[k]
		if before == nil && !hasUDP(now) {
			continue
		}
		if before != now {
			out = append(out, Change{Old: before, New: now})
		}
		if hasUDP(now) {
			m.synced[k] = now
		} else {
			delete(m.synced, k)
		}
	}
	return out
}

func hasUDP(s *model.Service) bool { return len(udpPorts(s)) > 0 }

// sweep adds to changes every remembered Service that is not in them, as new (nil before): its
// Targets are all its frontends, keeping its serving endpoints.
func (m *memory) sweep(changes []Change) []Change {
	in := make(map[model.ServiceKey]bool, len(changes))
	for _, c := range changes {
		if c.New != nil {
			in[c.New.Key] = true
		}
	}
	for k, s := range m.synced {
		if !in[k] {
			changes = append(changes, Change{New: s})
		}
	}
	return changes
}
