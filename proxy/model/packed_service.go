package model

import (
	"bytes"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// PackedService is a Service kept in its protobuf encoding, for a source that holds thousands
// of them for the life of the process: the Kubernetes source's informer cache and the Tracker
// share one (UpsertPackedService). A slimmed Service encodes into a fraction of what it decodes
// into; the Tracker reads one only to convert it again (its slices or the node changed), and
// decoding is cheap beside that conversion (bench/README.md, "Memory: peak resident set").
// A PackedService never changes.
type PackedService struct {
	key ServiceKey
	raw []byte
}

// PackService encodes svc (not modified, not kept).
func PackService(svc *corev1.Service) (*PackedService, error) {
	raw, err := svc.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encode service %s/%s: %w", svc.Namespace, svc.Name, err)
	}
	return &PackedService{key: ServiceKey{Namespace: svc.Namespace, Name: svc.Name}, raw: raw}, nil
}

// Key is the Service's namespace and name.
func (p *PackedService) Key() ServiceKey { return p.key }

// Service decodes the Service: a new object each call, the caller's.
func (p *PackedService) Service() *corev1.Service {
	svc := &corev1.Service{}
	if err := svc.Unmarshal(p.raw); err != nil {
		// The bytes are PackService's own encoding and never change: only a bug gets here.
		panic(fmt.Sprintf("model: decode packed service %s: %v", p.key, err))
	}
	return svc
}

// Equal reports whether p and q encode the same Service (the encoding is deterministic: map
// entries in key order).
func (p *PackedService) Equal(q *PackedService) bool {
	return p == q || (p != nil && q != nil && p.key == q.key && bytes.Equal(p.raw, q.raw))
}

// Size is the length of the encoding, for tests and measurements.
func (p *PackedService) Size() int { return len(p.raw) }

// UpsertPackedService is UpsertService for a Service its source keeps packed (the Kubernetes
// source's informer cache): the Tracker keeps p, one copy for both, and decodes it when it
// converts the Service.
func (t *Tracker) UpsertPackedService(p *PackedService) {
	if p == nil {
		return
	}
	key := p.Key()
	t.update(func() []rejectionEvent {
		ts := t.services[key]
		if ts == nil {
			ts = &trackedService{}
			t.services[key] = ts
		} else if ts.invalid == nil && ts.packed.Equal(p) {
			t.counts.countService(key, false)
			return nil
		}
		t.counts.countService(key, true)
		ts.obj, ts.packed, ts.invalid = nil, p, nil
		return t.recompute([]ServiceKey{key})
	})
}

// service is the tracked Service's object (decoded if held packed), nil once deleted.
func (ts *trackedService) service() *corev1.Service {
	if ts.packed != nil {
		return ts.packed.Service()
	}
	return ts.obj
}

// held reports whether the Service exists (is not deleted).
func (ts *trackedService) held() bool { return ts.obj != nil || ts.packed != nil }
