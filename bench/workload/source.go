package workload

import (
	"sort"
	"sync"
	"time"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// Source holds a model and records changes to it; it is what proxier.New reads from (the
// change tracker's role, without Kubernetes objects). Safe for concurrent use.
type Source struct {
	mu       sync.Mutex
	services map[model.ServiceKey]*model.Service
	node     *model.Node
	changed  map[model.ServiceKey]bool
	since    time.Time
}

// NewSource returns a Source holding node and services, with no pending changes.
func NewSource(node *model.Node, services []*model.Service) *Source {
	s := &Source{services: map[model.ServiceKey]*model.Service{}, node: node, changed: map[model.ServiceKey]bool{}}
	for _, svc := range services {
		s.services[svc.Key] = svc
	}
	return s
}

// Put adds or replaces Services and records them as changed.
func (s *Source) Put(services ...*model.Service) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, svc := range services {
		s.services[svc.Key] = svc
		s.changed[svc.Key] = true
	}
	if s.since.IsZero() && len(services) > 0 {
		s.since = time.Now()
	}
}

// TakeChanges returns and clears the recorded changes.
func (s *Source) TakeChanges() model.Changes {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := model.Changes{Since: s.since}
	for k := range s.changed {
		c.Services = append(c.Services, k)
	}
	sort.Slice(c.Services, func(i, j int) bool { return c.Services[i].String() < c.Services[j].String() })
	s.changed, s.since = map[model.ServiceKey]bool{}, time.Time{}
	return c
}

// Service returns the Service named k, or nil.
func (s *Source) Service(k model.ServiceKey) *model.Service {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.services[k]
}

// Snapshot returns the whole model.
func (s *Source) Snapshot() model.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := model.Snapshot{Services: make(map[model.ServiceKey]*model.Service, len(s.services)), Node: s.node}
	for k, v := range s.services {
		snap.Services[k] = v
	}
	return snap
}
