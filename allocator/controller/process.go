package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// EventAction is the action of every Event the controller sends; the reasons are the policy
// package's (policy.ReasonConflict and the others), shared with manifest mode.
const EventAction = "AllocateNodePortBlock"

// problem is one refusal to report as a Warning Event on the Service.
type problem struct {
	reason, msg string
	related     *corev1.Service
}

// process brings one Service's blocks and annotation in line with what it asks for. It is
// level-triggered: the same Service processed twice changes nothing the second time.
func (s *session) process(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // not a key this controller queued; nothing to retry
	}
	svc, err := s.lister.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.releaseAll(key)
		delete(s.reported, key)
		return nil
	}
	if err != nil {
		return fmt.Errorf("read Service %s from the cache: %w", key, err)
	}
	if h := s.held[key]; h != nil && h.uid != svc.UID {
		s.releaseAll(key) // deleted and created again under the same name
	}
	w := analyze(svc)
	switch {
	case !w.eligible:
		// A type change, a headless Service or a dropped port-ranges annotation: release, and
		// take the record away so the proxies program nothing for it.
		s.releaseAll(key)
		s.report(svc, nil)
		if w.hasRecorded {
			return s.write(ctx, svc, nil)
		}
		return nil
	case !w.recordedOK:
		_, perr := annotation.ParseRanges(w.recordedRaw)
		s.report(svc, []problem{s.problemOf(policy.Invalid(perr))})
		return nil
	case !w.rangesOK:
		// The proxies reject the Service and report why; keep what it holds, change nothing.
		s.report(svc, nil)
		return nil
	}
	return s.assign(ctx, svc, w)
}

// assign plans the blocks of an eligible Service, claims new ones, writes the annotation if it
// differs and commits. New blocks are released again if the write fails.
func (s *session) assign(ctx context.Context, svc *corev1.Service, w wants) error {
	key := keyOf(svc)
	h := s.held[key]
	if h == nil {
		h = &holding{uid: svc.UID, created: svc.CreationTimestamp, blocks: map[string]allocator.Range{}}
	}
	next := &holding{uid: svc.UID, created: svc.CreationTimestamp, blocks: map[string]allocator.Range{}}
	var probs []problem
	// recorded: the annotation names the identity block of the port (a claim of its own; a
	// different block is refused and its entry rewritten or removed).
	recorded := map[string]bool{}
	for _, r := range w.ranges {
		want := policy.Block(r)
		rec, ok := w.recorded[r.Name]
		recorded[r.Name] = ok && policy.Block(rec) == want
		// A recorded block this Service held is stale (its range moved), not a request.
		if held, was := h.blocks[r.Name]; ok && policy.Block(rec) != want && (!was || held != policy.Block(rec)) {
			probs = append(probs, s.problemOf(policy.Shifted(r, rec)))
		}
	}
	// Keep first, so releases below never touch a block this Service still uses.
	for _, r := range w.ranges {
		want := policy.Block(r)
		if b, ok := h.blocks[r.Name]; ok && b == want && policy.KeepsHeld(svc, recorded[r.Name]) {
			next.blocks[r.Name] = want
		}
	}
	s.release(key, h, next.blocks)
	s.held[key] = next
	var granted []allocator.Range // claimed now, not yet in the annotation
	waiting := false
	for _, r := range w.ranges {
		if _, kept := next.blocks[r.Name]; kept {
			continue
		}
		want := policy.Block(r)
		if !recorded[r.Name] && !w.allocates {
			continue // KEP-1864: allocateLoadBalancerNodePorts: false asks for no new block
		}
		alreadyShared := false
		for _, b := range next.blocks {
			alreadyShared = alreadyShared || b == want
		}
		if err := s.claim(svc, next, r.Name, want, recorded[r.Name]); err != nil {
			p := s.problemOf(policy.RefuseBlock(key, r.Name, want, s.cfg.BlockRange, err))
			waiting = waiting || p.reason == policy.ReasonConflict
			probs = append(probs, p)
			continue
		}
		if !recorded[r.Name] && !alreadyShared {
			granted = append(granted, want)
		}
	}
	if waiting {
		s.waiting[key] = true
	} else {
		delete(s.waiting, key)
	}
	s.report(svc, probs)
	value := formatBlocks(w.ranges, next.blocks)
	if value == w.recordedRaw && (w.hasRecorded || value == "") {
		return nil
	}
	var v *string
	if value != "" {
		v = &value
	}
	if err := s.write(ctx, svc, v); err != nil {
		for _, b := range granted {
			for n, nb := range next.blocks {
				if nb == b {
					delete(next.blocks, n)
				}
			}
			if rerr := s.alloc.ReleaseBlock(b); rerr != nil {
				s.log.Error(rerr, "Rolling back a node-port block after a failed write", "service", key, "block", b.String())
			}
		}
		return err
	}
	for _, b := range granted {
		s.log.Info("Assigned node-port block", "service", key, "block", b.String())
	}
	return nil
}

// claim takes block b for port name of svc into h. A recorded claim (the annotation already
// names b) of an older Service takes the block from a newer holder, which is then processed
// again and loses its entry: of two Services recording overlapping blocks, the older keeps it,
// whichever replica saw them first.
func (s *session) claim(svc *corev1.Service, h *holding, name string, b allocator.Range, recorded bool) error {
	key := keyOf(svc)
	for range len(s.held) + 1 {
		err := s.claimOwn(key, h, name, b)
		var ae *allocator.AllocatedError
		if err == nil || !recorded || !errors.As(err, &ae) {
			return err
		}
		hk := policy.HolderOf(ae.Owner)
		hh := s.held[hk]
		if hk == key || hh == nil || !older(svc.CreationTimestamp, key, hh.created, hk) {
			return err
		}
		s.log.Info("Older Service records a block a newer one holds; the newer gives it up", "service", key, "holder", hk, "block", b.String())
		var keep map[string]allocator.Range
		for n, hb := range hh.blocks {
			if ae.Block == nil || hb != *ae.Block {
				if keep == nil {
					keep = map[string]allocator.Range{}
				}
				keep[n] = hb
			}
		}
		s.release(hk, hh, keep)
		hh.blocks = maps.Clone(keep)
		if hh.blocks == nil {
			hh.blocks = map[string]allocator.Range{}
		}
		s.queue.Add(hk)
	}
	return fmt.Errorf("claim %s for %s: too many holders", b, key)
}

// problemOf turns a refusal into the Event to send, with the holding Service as the related
// object when there is one.
func (s *session) problemOf(r *policy.Refusal) problem {
	p := problem{reason: r.Reason, msg: r.Error()}
	if ns, name, err := cache.SplitMetaNamespaceKey(r.Holder); r.Holder != "" && err == nil {
		if other, err := s.lister.Services(ns).Get(name); err == nil {
			p.related = other
		}
	}
	return p
}

// report sends a Warning Event for each problem not yet reported on this Service object, and
// forgets the ones that went away, so a problem that comes back is news again.
func (s *session) report(svc *corev1.Service, probs []problem) {
	key := keyOf(svc)
	last := s.reported[key]
	if last.uid != svc.UID {
		last = reported{uid: svc.UID}
	}
	now := map[string]bool{}
	for _, p := range probs {
		id := p.reason + "\x00" + p.msg
		now[id] = true
		if last.sent[id] {
			continue
		}
		if p.related != nil {
			s.rec.Eventf(svc, p.related, corev1.EventTypeWarning, p.reason, EventAction, "%s", p.msg)
		} else {
			s.rec.Eventf(svc, nil, corev1.EventTypeWarning, p.reason, EventAction, "%s", p.msg)
		}
		s.log.Info("Node-port block refused", "service", key, "reason", p.reason, "message", p.msg)
	}
	if len(now) == 0 {
		delete(s.reported, key)
		return
	}
	s.reported[key] = reported{uid: svc.UID, sent: now}
}

// write sets (value != nil) or removes the node-port-ranges annotation with a merge patch that
// carries the resourceVersion the decision was made on: if the Service changed meanwhile the
// write fails with a conflict and the Service is processed again from the newer version.
func (s *session) write(ctx context.Context, svc *corev1.Service, value *string) error {
	patch := map[string]any{"metadata": map[string]any{
		"resourceVersion": svc.ResourceVersion,
		"annotations":     map[string]any{annotation.NodePortRangesKey: value},
	}}
	data, err := json.Marshal(patch)
	if err != nil {
		return fmt.Errorf("encode patch: %w", err)
	}
	_, err = s.cfg.Client.CoreV1().Services(svc.Namespace).Patch(ctx, svc.Name, types.MergePatchType, data,
		metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		what := "remove"
		if value != nil {
			what = "write " + *value + " to"
		}
		return fmt.Errorf("%s annotation %s of Service %s: %w (the controller needs patch on services)",
			what, annotation.NodePortRangesKey, keyOf(svc), err)
	}
	return nil
}
