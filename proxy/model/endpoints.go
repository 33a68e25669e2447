package model

import (
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// parsedSlice is one EndpointSlice with its endpoints' addresses parsed once, shared by all
// ServicePorts of the Service.
type parsedSlice struct {
	ports     []discoveryv1.EndpointPort
	endpoints []Endpoint // Port not yet set
}

// endpointSet is every usable EndpointSlice of one Service.
type endpointSet struct {
	slices   []parsedSlice
	warnings []string
}

// OwnerOf returns the Service an EndpointSlice belongs to (its kubernetes.io/service-name
// label), and false for slices without the label (they belong to no Service).
func OwnerOf(s *discoveryv1.EndpointSlice) (ServiceKey, bool) {
	if s == nil {
		return ServiceKey{}, false
	}
	name, ok := s.Labels[discoveryv1.LabelServiceName]
	if !ok || name == "" {
		return ServiceKey{}, false
	}
	return ServiceKey{Namespace: s.Namespace, Name: name}, true
}

// collectEndpoints parses the slices of Service key in the wanted address families. Slices are
// taken in name order so that the result does not depend on the caller's order. Endpoints whose
// first address does not parse or is of the wrong family are skipped and counted in a warning;
// only the first address is used, as upstream does.
func collectEndpoints(key ServiceKey, slices []*discoveryv1.EndpointSlice, families map[discoveryv1.AddressType]bool) endpointSet {
	sorted := make([]*discoveryv1.EndpointSlice, 0, len(slices))
	for _, s := range slices {
		if owner, ok := OwnerOf(s); ok && owner == key && families[s.AddressType] {
			sorted = append(sorted, s)
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var set endpointSet
	for _, s := range sorted {
		ps := parsedSlice{ports: s.Ports}
		bad := 0
		for i := range s.Endpoints {
			ep, ok := parseEndpoint(&s.Endpoints[i], s.AddressType)
			if !ok {
				bad++
				continue
			}
			ps.endpoints = append(ps.endpoints, ep)
		}
		if bad > 0 {
			set.warnings = append(set.warnings, fmt.Sprintf(
				"EndpointSlice %s/%s: skipped %d endpoint(s) whose first address is not an %s address",
				s.Namespace, s.Name, bad, s.AddressType))
		}
		set.slices = append(set.slices, ps)
	}
	return set
}

func parseEndpoint(e *discoveryv1.Endpoint, family discoveryv1.AddressType) (Endpoint, bool) {
	if len(e.Addresses) == 0 {
		return Endpoint{}, false
	}
	a, err := netip.ParseAddr(e.Addresses[0])
	if err != nil || a.Zone() != "" {
		return Endpoint{}, false
	}
	a = a.Unmap()
	if a.Is4() != (family == discoveryv1.AddressTypeIPv4) {
		return Endpoint{}, false
	}
	c := e.Conditions
	ep := Endpoint{
		Addr:        a,
		Ready:       c.Ready == nil || *c.Ready,
		Terminating: c.Terminating != nil && *c.Terminating,
	}
	ep.Serving = ep.Ready
	if c.Serving != nil {
		ep.Serving = *c.Serving
	}
	if e.NodeName != nil {
		ep.NodeName = *e.NodeName
	}
	if e.Zone != nil {
		ep.Zone = *e.Zone
	}
	if e.Hints != nil {
		for _, z := range e.Hints.ForZones {
			ep.ZoneHints = append(ep.ZoneHints, z.Name)
		}
	}
	return ep, true
}

// slicePort finds the port of a slice that serves sp and returns the endpoint port to use.
// EndpointSlice ports carry the Service port's name and the resolved target port, so named
// targetPorts are resolved here, per slice. An all-ports ServicePort uses any slice port of its
// protocol, one without a port number included (the EndpointSlice API's "all ports"), and every
// slice that lists no ports at all: KEP-2610's EndpointSlice of an all-ports Service has none,
// and a slice without ports can only mean "every port" for a Service that forwards every port.
func slicePort(ports []discoveryv1.EndpointPort, sp *ServicePort) (uint16, bool) {
	if sp.AllPorts && len(ports) == 0 {
		return 0, true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if mp, ok := protocolOf(proto); !ok || mp != sp.Name.Protocol {
			continue
		}
		if sp.AllPorts {
			return 0, true
		}
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name != sp.Name.Port {
			continue
		}
		if sp.KeepsPort() {
			return 0, true
		}
		if p.Port == nil || *p.Port < 1 || *p.Port > annotation.MaxPort {
			return 0, false
		}
		return uint16(*p.Port), true
	}
	return 0, false
}

type epKey struct {
	addr netip.Addr
	port uint16
}

// forPort returns the endpoints of one ServicePort, deduplicated by address and port (a ready
// copy wins over a not-ready one, as an endpoint may briefly sit in two slices) and sorted.
func (s endpointSet) forPort(sp *ServicePort) []Endpoint {
	// Sized once: the model keeps this slice, and append's doubling left ~40% of every
	// Service's endpoints unused (10 endpoints took room for 16).
	n := 0
	for _, ps := range s.slices {
		if _, ok := slicePort(ps.ports, sp); ok {
			n += len(ps.endpoints)
		}
	}
	if n == 0 {
		return nil
	}
	out := make([]Endpoint, 0, n)
	index := make(map[epKey]int, n)
	for _, ps := range s.slices {
		port, ok := slicePort(ps.ports, sp)
		if !ok {
			continue
		}
		for _, ep := range ps.endpoints {
			ep.Port = port
			k := epKey{ep.Addr, port}
			if i, dup := index[k]; dup {
				if ep.Ready && !out[i].Ready {
					out[i] = ep
				}
				continue
			}
			index[k] = len(out)
			out = append(out, ep)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].Addr.Compare(out[j].Addr); c != 0 {
			return c < 0
		}
		return out[i].Port < out[j].Port
	})
	return out
}
