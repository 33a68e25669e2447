package nodeport

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// HealthCheckPort is Problem.Port for the health-check node port.
const HealthCheckPort = "healthCheckNodePort"

// round is one assignment over everything loaded. It starts from empty allocators and claims in
// phases, so the result depends only on the Services and what they held before, never on the
// order of events:
//
//  0. Services kept from files that failed to load: everything they held.
//  1. Live Services, oldest first: what they held and still want (an explicit port equal to the
//     held one, or, while the Service allocates, a port left unset that the API server would
//     patch from the old object: policy.KeepsHeld).
//  2. Explicit requests not yet satisfied (nodePort, healthCheckNodePort, node-port-ranges
//     entries), oldest first: the oldest requester wins a contested port.
//  3. Dynamic allocation for what is still missing, oldest first.
//
// Holders come first, so a Service never loses a port because another file changed.
type round struct {
	cfg       Config
	nodePorts *allocator.Allocator
	blocks    *allocator.Allocator // nil: no block range
	live      map[string]*plan
	order     []*plan
	kept      map[string]svcEntry
	problems  []Problem
	events    []event
	// written is what the last round gave the model, by key; nextWritten what this one gives.
	written, nextWritten map[string]written
}

// event is one new node-port request, for the metrics.
type event struct {
	scope allocator.Scope
	ok    bool
}

// plan is one live Service's assignment in progress.
type plan struct {
	key, file string
	svc       *corev1.Service
	held      svcEntry
	// ranges maps each ranged ServicePort name to its range (nil when the annotation does not
	// parse: the model rejects the Service, and its ports are treated as single ports here).
	ranges map[string]annotation.PortRange
	// requests are the node-port-ranges entries; requestsUnusable when that annotation does not
	// parse or names a port that is not a range of the same width: the model rejects the
	// Service with its own reason, and the annotation is left as written.
	requests         map[string]annotation.PortRange
	requestsUnusable bool
	// shifted are the ranged ports whose request was refused as shifted: they get their
	// identity block where blocks may be allocated, as the cluster controller writes it.
	shifted map[string]bool

	nodePort []int        // result by spec index; 0 none
	claimed  map[int]bool // node ports this Service holds in this round
	hc       int
	blocks   map[string]allocator.Range
}

func newRound(cfg Config, last map[string]written) *round {
	var opts []allocator.Option
	if cfg.Rand != nil {
		opts = append(opts, allocator.WithRand(cfg.Rand))
	}
	r := &round{cfg: cfg, live: map[string]*plan{}, kept: map[string]svcEntry{}, written: last, nextWritten: map[string]written{}}
	// Both ranges were validated by New, so these cannot fail.
	r.nodePorts, _ = allocator.New(cfg.NodePortRange, opts...)
	if cfg.hasBlocks() {
		r.blocks, _ = allocator.New(cfg.BlockRange, opts...)
	}
	return r
}

func (r *round) addLive(svc *corev1.Service, file, key string, held svcEntry) *plan {
	p := &plan{key: key, file: file, svc: svc, held: held, nodePort: make([]int, len(svc.Spec.Ports)),
		claimed: map[int]bool{}, blocks: map[string]allocator.Range{}, shifted: map[string]bool{}}
	if rs, err := annotation.ParseRanges(svc.Annotations[annotation.PortRangesKey]); err == nil {
		p.ranges = map[string]annotation.PortRange{}
		for _, x := range rs {
			p.ranges[x.Name] = x
		}
	}
	p.requests = map[string]annotation.PortRange{}
	if v, ok := svc.Annotations[annotation.NodePortRangesKey]; ok {
		rs, err := annotation.ParseRanges(v)
		p.requestsUnusable = err != nil
		for _, x := range rs {
			if own, ok := p.ranges[x.Name]; !ok || own.Width() != x.Width() {
				p.requestsUnusable = true
			}
			p.requests[x.Name] = x
		}
	}
	r.live[key] = p
	r.order = append(r.order, p)
	return p
}

func (r *round) addKept(key string, e svcEntry) { r.kept[key] = e }

func (r *round) problem(key, port string, err error) {
	r.problems = append(r.problems, Problem{Service: key, Port: port, Err: err})
}

func (r *round) run() {
	sort.SliceStable(r.order, func(i, j int) bool {
		a, b := r.order[i].svc, r.order[j].svc
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return r.order[i].key < r.order[j].key
	})
	r.claimKept()
	for _, phase := range []func(*plan){r.reuse, r.static, r.dynamic, r.write} {
		for _, p := range r.order {
			if p.assigned() {
				phase(p)
			}
		}
	}
}

// assigned: the Service gets node ports and blocks (policy.HasNodePorts), or at least a
// health-check node port (an all-ports LoadBalancer with externalTrafficPolicy: Local).
func (p *plan) assigned() bool { return policy.HasNodePorts(p.svc) || policy.NeedsHealthCheck(p.svc) }

// claimKept re-claims everything held by Services whose file failed to load; the feeder still
// serves their last good version, which has exactly these ports.
func (r *round) claimKept() {
	keys := make([]string, 0, len(r.kept))
	for k := range r.kept {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		e := r.kept[k]
		var out svcEntry
		out.File = e.File
		seen := map[int]bool{}
		for _, pe := range e.Ports {
			if seen[pe.NodePort] || r.nodePorts.AllocatePort(pe.NodePort, k) == nil {
				seen[pe.NodePort] = true
				out.Ports = append(out.Ports, pe)
			}
		}
		if e.HealthCheckNodePort != 0 && r.nodePorts.AllocatePort(e.HealthCheckNodePort, k) == nil {
			out.HealthCheckNodePort = e.HealthCheckNodePort
		}
		claimed := map[allocator.Range]bool{} // two ranged ports of one range share a block
		for _, be := range e.Blocks {
			if r.blocks == nil {
				continue
			}
			if claimed[be.Block] {
				out.Blocks = append(out.Blocks, be)
			} else if _, err := r.blocks.AllocateBlockAt(be.Block.First, be.Block.Size(), policy.BlockOwner(k, be.Name)); err == nil {
				claimed[be.Block] = true
				out.Blocks = append(out.Blocks, be)
			}
		}
		r.kept[k] = out
	}
}

// portsOf is the spec ports that get node ports: none for a Service without node ports (an
// all-ports one, KEP-2610, whose nodePort values are left as written and never programmed).
func (p *plan) portsOf() []corev1.ServicePort {
	if !policy.HasNodePorts(p.svc) {
		return nil
	}
	return p.svc.Spec.Ports
}

// isRanged: the ServicePort is a port range (it gets a block, never a single node port).
func (p *plan) isRanged(name string) bool {
	_, ok := p.ranges[name]
	return ok
}

// claimPort takes node port n for p once (two ServicePorts of one Service, TCP and UDP of the
// same number, share a node port as the API server allows).
func (r *round) claimPort(p *plan, n int) error {
	if p.claimed[n] {
		return nil
	}
	if err := r.nodePorts.AllocatePort(n, p.key); err != nil {
		return err
	}
	p.claimed[n] = true
	return nil
}

func (r *round) reuse(p *plan) {
	for i := range p.portsOf() {
		sp := &p.svc.Spec.Ports[i]
		h := p.held.port(sp.Name)
		// KEP-1864: an unset port is patched from the held one only while the Service
		// allocates; with allocateLoadBalancerNodePorts: false, removing nodePort releases it.
		if p.isRanged(sp.Name) || h == 0 || (sp.NodePort != 0 && int(sp.NodePort) != h) ||
			!policy.KeepsHeld(p.svc, sp.NodePort != 0) {
			continue
		}
		if err := r.claimPort(p, h); err != nil {
			if sp.NodePort == 0 { // an explicit request is reported by the static phase
				r.problem(p.key, sp.Name, fmt.Errorf("node port %d held before is lost (%w); a new one is assigned if allowed", h, err))
			}
			continue
		}
		p.nodePort[i] = h
	}
	if h, want := p.held.HealthCheckNodePort, int(p.svc.Spec.HealthCheckNodePort); policy.NeedsHealthCheck(p.svc) && h != 0 && (want == 0 || want == h) {
		if err := r.claimPort(p, h); err == nil {
			p.hc = h
		}
	}
	if r.blocks == nil || p.requestsUnusable {
		return
	}
	for name, own := range p.ranges {
		b, ok := p.held.block(name)
		if !ok {
			continue
		}
		if b != policy.Block(own) {
			continue // the range moved: its identity block moves with it
		}
		// Kept while the annotation names it, or, unnamed, while the Service allocates
		// (KEP-1864: removing the entry releases it), as the cluster controller keeps it.
		req, asked := p.requests[name]
		if !policy.KeepsHeld(p.svc, asked && policy.Block(req) == b) {
			continue
		}
		_ = r.claimOwnBlock(p, name, b) // lost to a kept Service: asked for again below
	}
}

func (r *round) static(p *plan) {
	for i := range p.portsOf() {
		sp := &p.svc.Spec.Ports[i]
		if p.isRanged(sp.Name) || sp.NodePort == 0 || p.nodePort[i] != 0 {
			continue
		}
		err := r.claimPort(p, int(sp.NodePort))
		r.events = append(r.events, event{allocator.ScopeStatic, err == nil})
		if err != nil {
			r.problem(p.key, sp.Name, fmt.Errorf("nodePort %d not given, the port is served without it: %w", sp.NodePort, err))
			continue
		}
		p.nodePort[i] = int(sp.NodePort)
	}
	if want := int(p.svc.Spec.HealthCheckNodePort); policy.NeedsHealthCheck(p.svc) && want != 0 && p.hc == 0 {
		err := r.claimPort(p, want)
		r.events = append(r.events, event{allocator.ScopeStatic, err == nil})
		if err != nil {
			r.problem(p.key, HealthCheckPort, fmt.Errorf("healthCheckNodePort %d not given: %w", want, err))
		} else {
			p.hc = want
		}
	}
	if p.requestsUnusable {
		return
	}
	for _, name := range p.rangedNames() {
		req, asked := p.requests[name]
		if !asked {
			continue
		}
		if own := p.ranges[name]; policy.Block(req) != policy.Block(own) {
			r.problem(p.key, name, policy.Shifted(own, req))
			p.shifted[name] = true
			continue
		}
		if _, done := p.blocks[name]; done {
			continue
		}
		r.claimBlock(p, name, req)
	}
}

// claimOwnBlock claims block b for ranged port name of p, sharing it when another ranged port
// of p already holds the very same block (TCP and UDP of one range), as the controller does.
func (r *round) claimOwnBlock(p *plan, name string, b allocator.Range) error {
	for _, held := range p.blocks {
		if held == b {
			p.blocks[name] = b
			return nil
		}
	}
	if _, err := r.blocks.AllocateBlockAt(b.First, b.Size(), policy.BlockOwner(p.key, name)); err != nil {
		return err
	}
	p.blocks[name] = b
	return nil
}

// claimBlock claims the identity block req (the static phase has refused shifted ones) for
// ranged port name.
func (r *round) claimBlock(p *plan, name string, req annotation.PortRange) {
	b := policy.Block(req)
	if r.blocks == nil {
		r.problem(p.key, name, policy.RefuseBlock(p.key, name, b, r.cfg.BlockRange, policy.ErrNoBlockRange))
		return
	}
	if err := r.claimOwnBlock(p, name, b); err != nil {
		r.problem(p.key, name, policy.RefuseBlock(p.key, name, b, r.cfg.BlockRange, err))
	}
}

func (r *round) dynamic(p *plan) {
	allocate := policy.AllocatesNew(p.svc)
	for i := range p.portsOf() {
		sp := &p.svc.Spec.Ports[i]
		if p.isRanged(sp.Name) || sp.NodePort != 0 || p.nodePort[i] != 0 {
			continue
		}
		if n := p.sharedNodePort(i); n != 0 {
			p.nodePort[i] = n
			continue
		}
		if !allocate {
			continue
		}
		n, err := r.nodePorts.Allocate(p.key)
		r.events = append(r.events, event{allocator.ScopeDynamic, err == nil})
		if err != nil {
			r.problem(p.key, sp.Name, fmt.Errorf("no node port assigned: %w", err))
			continue
		}
		p.claimed[n] = true
		p.nodePort[i] = n
	}
	if policy.NeedsHealthCheck(p.svc) && p.hc == 0 && p.svc.Spec.HealthCheckNodePort == 0 {
		n, err := r.nodePorts.Allocate(p.key)
		r.events = append(r.events, event{allocator.ScopeDynamic, err == nil})
		if err != nil {
			r.problem(p.key, HealthCheckPort, fmt.Errorf("no health-check node port assigned: %w", err))
		} else {
			p.claimed[n] = true
			p.hc = n
		}
	}
	if p.requestsUnusable || !allocate {
		return
	}
	for _, name := range p.rangedNames() {
		if _, asked := p.requests[name]; asked && !p.shifted[name] {
			continue
		}
		if _, done := p.blocks[name]; done {
			continue
		}
		own := p.ranges[name]
		r.claimBlock(p, name, own)
	}
}

// sharedNodePort returns the node port already given to another ServicePort of the same port
// number (the API server gives TCP and UDP of one port one node port), or 0.
func (p *plan) sharedNodePort(i int) int {
	for j := range p.svc.Spec.Ports {
		if j != i && p.nodePort[j] != 0 && p.svc.Spec.Ports[j].Port == p.svc.Spec.Ports[i].Port && !p.isRanged(p.svc.Spec.Ports[j].Name) {
			return p.nodePort[j]
		}
	}
	return 0
}

// rangedNames lists the ranged ServicePorts in spec order, so results are deterministic.
func (p *plan) rangedNames() []string {
	var out []string
	for _, sp := range p.svc.Spec.Ports {
		if p.isRanged(sp.Name) {
			out = append(out, sp.Name)
		}
	}
	return out
}

// written is what an earlier round gave the model for one Service: the Service it was handed
// (in) and the copy with that round's assignment (out).
type written struct{ in, out *corev1.Service }

// write gives the model the Service with this round's assignment, never writing into the
// Service the load handed over (the manifest Watcher keeps those for the reloads to come): the
// Service itself when it already says what was assigned, the copy an earlier round made from
// the same Service when the assignment is the same again, or a new copy. So a reload hands the
// Feeder the very objects it fed last time for every Service whose file and assignment did not
// change, and the Feeder skips them by identity.
func (r *round) write(p *plan) {
	in := p.svc
	if !p.apply(scratch(in)) {
		return
	}
	if w, ok := r.written[p.key]; ok && w.in == in && !p.apply(scratch(w.out)) {
		p.svc = w.out
	} else {
		p.svc = in.DeepCopy()
		p.apply(p.svc)
	}
	r.nextWritten[p.key] = written{in: in, out: p.svc}
}

// scratch is a copy of svc that apply may write to: the fields apply writes are its own, the
// rest is shared with svc.
func scratch(svc *corev1.Service) *corev1.Service {
	c := *svc
	c.Spec.Ports = slices.Clone(svc.Spec.Ports)
	c.Annotations = maps.Clone(svc.Annotations)
	return &c
}

// apply records the result on svc, and says whether that changed anything.
func (p *plan) apply(svc *corev1.Service) (changed bool) {
	for i := range p.portsOf() {
		if !p.isRanged(svc.Spec.Ports[i].Name) && svc.Spec.Ports[i].NodePort != int32(p.nodePort[i]) {
			svc.Spec.Ports[i].NodePort = int32(p.nodePort[i])
			changed = true
		}
	}
	if policy.NeedsHealthCheck(svc) && svc.Spec.HealthCheckNodePort != int32(p.hc) {
		svc.Spec.HealthCheckNodePort = int32(p.hc)
		changed = true
	}
	if p.requestsUnusable || !policy.HasNodePorts(svc) {
		return changed
	}
	var entries []string
	for _, name := range p.rangedNames() {
		if b, ok := p.blocks[name]; ok {
			entries = append(entries, fmt.Sprintf("%s=%s", name, b))
		}
	}
	old, had := svc.Annotations[annotation.NodePortRangesKey]
	switch {
	case len(entries) > 0:
		if v := strings.Join(entries, ","); !had || old != v {
			if svc.Annotations == nil {
				svc.Annotations = map[string]string{}
			}
			svc.Annotations[annotation.NodePortRangesKey] = v
			changed = true
		}
	case had:
		delete(svc.Annotations, annotation.NodePortRangesKey)
		changed = true
	}
	return changed
}

// result is the assignment to keep: every live Service's holdings, plus the kept ones.
func (r *round) result() map[string]svcEntry {
	out := map[string]svcEntry{}
	for k, e := range r.kept {
		if !e.empty() {
			out[k] = e
		}
	}
	for _, p := range r.order {
		if !p.assigned() {
			continue
		}
		e := svcEntry{File: p.file, HealthCheckNodePort: p.hc}
		named := map[string]bool{}
		for i, sp := range p.svc.Spec.Ports {
			if p.nodePort[i] != 0 && !named[sp.Name] {
				named[sp.Name] = true
				e.Ports = append(e.Ports, portEntry{Name: sp.Name, NodePort: p.nodePort[i]})
			}
		}
		for _, name := range p.rangedNames() {
			if b, ok := p.blocks[name]; ok {
				e.Blocks = append(e.Blocks, blockEntry{Name: name, Block: b})
			}
		}
		if !e.empty() {
			out[p.key] = e
		}
	}
	return out
}
