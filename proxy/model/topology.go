package model

import "slices"

// LabelTopologyZone is the Node label that names the node's zone.
const LabelTopologyZone = "topology.kubernetes.io/zone"

// ExternallyAccessible reports whether the port takes traffic from outside the cluster: a node
// port (never for all-ports Services, whose node ports are not programmed), a LoadBalancer IP or
// an external IP.
func (p *ServicePort) ExternallyAccessible() bool {
	return (p.NodePort != 0 && !p.AllPorts) || len(p.LoadBalancerIPs) > 0 || len(p.ExternalIPs) > 0
}

// UsesClusterEndpoints reports whether some traffic to the port is spread over the whole
// cluster: ClusterIP traffic under internalTrafficPolicy Cluster, and external traffic in any
// case (with externalTrafficPolicy Local, traffic from pods and from the node itself still is).
func (p *ServicePort) UsesClusterEndpoints() bool {
	return !p.InternalTrafficLocal || p.ExternallyAccessible()
}

// UsesLocalEndpoints reports whether some traffic to the port goes only to this node's
// endpoints.
func (p *ServicePort) UsesLocalEndpoints() bool {
	return p.InternalTrafficLocal || (p.ExternalTrafficLocal && p.ExternallyAccessible())
}

// EndpointCategories is what each traffic policy of a ServicePort may use on one node.
type EndpointCategories struct {
	// Cluster are the endpoints for Cluster traffic policy: the ready ones (narrowed to this
	// zone by topology), else the serving terminating ones. Nil when the port never uses it.
	Cluster []Endpoint
	// Local are this node's endpoints for Local traffic policy: the ready ones, else the serving
	// terminating ones. Nil when the port never uses it.
	Local []Endpoint
	// HasAny is true when some endpoint anywhere in the cluster can take traffic.
	HasAny bool
}

// CategorizeEndpoints sorts eps (one family's endpoints of p) by the traffic policy that may use
// them on node nodeName in zone, as kube-proxy does:
//   - ready endpoints first; only when none is ready (for Cluster: anywhere; for Local: on this
//     node), the serving terminating ones; terminating endpoints never get new connections
//     otherwise;
//   - topology narrows Cluster only, never Local, and falls back mode by mode: when every ready
//     endpoint has node hints and one of them is for this node, the endpoints hinted for this
//     node; else, when every ready endpoint has zone hints and one of them is for this zone, the
//     endpoints hinted for this zone; else (a hint missing, none for this node or zone, a node
//     without a zone) all ready endpoints.
//
// trafficDistribution stands in for the EndpointSlice controller that would have written the
// hints: under PreferClose (and PreferSameZone, PreferSameNode) an endpoint without zone hints
// is taken as hinted for its own zone; under PreferSameNode, when no ready endpoint has node
// hints, each is taken as hinted for its own node, which is what that controller writes. So
// where hints were not written (manifest mode) close endpoints are still preferred, while node
// hints that are written are read exactly as upstream reads them (one missing: no node mode).
// An endpoint that names no node (or zone) counts as unhinted and turns the mode off.
func CategorizeEndpoints(p *ServicePort, eps []Endpoint, nodeName, zone string) EndpointCategories {
	var c EndpointCategories
	if len(eps) == 0 {
		return c
	}
	servingTerminating := func(ep *Endpoint) bool { return ep.Serving && ep.Terminating }
	if p.UsesClusterEndpoints() {
		hinted := topologyHinted(p, eps, nodeName, zone)
		c.Cluster = filterEndpoints(eps, func(ep *Endpoint) bool {
			return ep.Ready && (hinted == nil || hinted(ep))
		})
		if len(c.Cluster) == 0 {
			c.Cluster = filterEndpoints(eps, servingTerminating)
		}
		c.HasAny = len(c.Cluster) > 0
	}
	if !p.UsesLocalEndpoints() {
		return c
	}
	local := func(ep *Endpoint) bool { return nodeName != "" && ep.NodeName() == nodeName }
	var localReady, localTerminating bool
	for i := range eps {
		ep := &eps[i]
		switch {
		case ep.Ready:
			c.HasAny = true
			localReady = localReady || local(ep)
		case servingTerminating(ep):
			c.HasAny = true
			localTerminating = localTerminating || local(ep)
		}
	}
	switch {
	case localReady:
		c.Local = filterEndpoints(eps, func(ep *Endpoint) bool { return local(ep) && ep.Ready })
	case localTerminating:
		c.Local = filterEndpoints(eps, func(ep *Endpoint) bool { return local(ep) && servingTerminating(ep) })
	}
	return c
}

// topologyHinted returns the filter of the endpoints topology keeps (see CategorizeEndpoints),
// or nil when topology does not apply.
func topologyHinted(p *ServicePort, eps []Endpoint, nodeName, zone string) func(*Endpoint) bool {
	// Node hints stand in only when no ready endpoint has any: a slice the controller is still
	// writing (one endpoint hinted, another not) turns the node mode off, as upstream.
	r := hintReader{preferClose: p.PreferClose, nodeStandIn: p.PreferSameNode && !slices.ContainsFunc(eps, func(ep Endpoint) bool {
		return ep.Ready && ep.Where().NodeHints != ""
	})}
	anyReady := false
	allNode, forNode := true, false
	allZone, forZone := true, false
	for i := range eps {
		ep := &eps[i]
		if !ep.Ready {
			continue
		}
		anyReady = true
		if h := r.nodes(ep); len(h) == 0 {
			allNode = false
		} else {
			forNode = forNode || (nodeName != "" && slices.Contains(h, nodeName))
		}
		if h := r.zones(ep); len(h) == 0 {
			allZone = false
		} else {
			forZone = forZone || (zone != "" && slices.Contains(h, zone))
		}
		if !allNode && !allZone {
			return nil // the usual case, no hints: decided at the first ready endpoint
		}
	}
	switch {
	case !anyReady:
		return nil
	case allNode && forNode:
		return func(ep *Endpoint) bool { return slices.Contains(r.nodes(ep), nodeName) }
	case allZone && forZone:
		return func(ep *Endpoint) bool { return slices.Contains(r.zones(ep), zone) }
	}
	return nil
}

// hintReader reads an endpoint's hints, standing in for the ones the EndpointSlice controller
// would have written (see CategorizeEndpoints). A value, not closures: categorizing runs for
// every port of every sync, and closures that escape cost an allocation each.
type hintReader struct {
	preferClose, nodeStandIn bool
}

func (r hintReader) zones(ep *Endpoint) []string {
	if hs := ep.ZoneHints(); len(hs) > 0 || !r.preferClose || ep.Zone() == "" {
		return hs
	}
	return []string{ep.Zone()}
}

func (r hintReader) nodes(ep *Endpoint) []string {
	if hs := ep.NodeHints(); len(hs) > 0 || !r.nodeStandIn || ep.NodeName() == "" {
		return hs
	}
	return []string{ep.NodeName()}
}

// filterEndpoints returns the endpoints of eps that keep accepts. When it accepts them all (the
// usual case: every endpoint ready, no topology) the result is eps itself, capped so that an
// append copies: a full sync categorizes every port's endpoints, and copying them cost ~10 MB
// of garbage at 10k Services × 10 endpoints.
func filterEndpoints(eps []Endpoint, keep func(*Endpoint) bool) []Endpoint {
	n := 0
	for i := range eps {
		if keep(&eps[i]) {
			n++
		}
	}
	if n == len(eps) {
		return eps[:n:n]
	}
	out := make([]Endpoint, 0, n)
	for i := range eps {
		if keep(&eps[i]) {
			out = append(out, eps[i])
		}
	}
	return out
}
