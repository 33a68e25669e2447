package conntrack

import "github.com/nftproxy/nftproxy/proxy/model"

// Memory remembers each Service's model as of the last successful sync, so the proxier can
// hand Targets before/after pairs without keeping old models itself. Stage what a sync is about
// to commit; Commit after the commit succeeded. When a sync fails, do not Commit: the staged
// Services wait and join the next sync's, still paired with their last committed model.
// Only Services with UDP ports are kept (the others never need cleaning). Not safe for
// concurrent use; the proxier calls it from its sync goroutine.
type Memory struct {
	synced map[model.ServiceKey]*model.Service
	staged map[model.ServiceKey]*model.Service
}

// NewMemory returns an empty Memory: every Service staged before the first Commit is new, so
// the first sync cleans every UDP frontend (flows left from before a restart).
func NewMemory() *Memory {
	return &Memory{synced: map[model.ServiceKey]*model.Service{}, staged: map[model.ServiceKey]*model.Service{}}
}

// Stage records that the next commit programs key as svc (nil: deleted). Models are shared with
// the tracker and never modified, so only the pointer is kept.
func (m *Memory) Stage(key model.ServiceKey, svc *model.Service) {
	m.staged[key] = svc
}

// Commit returns the before/after pairs of everything staged since the last Commit, in no
// particular order, and makes the staged models the committed ones.
func (m *Memory) Commit() []Change {
	var out []Change
	for k, now := range m.staged {
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
	clear(m.staged)
	return out
}

func hasUDP(s *model.Service) bool { return len(udpPorts(s)) > 0 }
