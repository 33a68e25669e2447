package model

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// EndpointSlice is what the model reads of one discovery EndpointSlice, parsed once when it
// arrives (ParseEndpointSlice). The Tracker keeps this instead of the API object, and manifest
// mode keeps nothing else: it takes about a third of the decoded objects' memory
// (bench/README.md, "Sizes the code's layout rests on"), and a Service's conversion no longer
// parses its slices again. It must not
// be modified once made: the Tracker, a source's cache and the models' ServicePorts share it.
type EndpointSlice struct {
	Namespace, Name string
	// Owner is the Service the slice belongs to (its kubernetes.io/service-name label); Owned
	// is false for a slice without the label, which belongs to no Service.
	Owner       ServiceKey
	Owned       bool
	AddressType discoveryv1.AddressType
	Ports       []EndpointSlicePort
	// Endpoints are those whose first address parses as an AddressType address (only the first
	// address is used, as upstream does), one per address (a ready copy wins over a not-ready
	// one, as an endpoint may briefly be listed twice), sorted by address. Their Port is the
	// number of the slice's first port (0 when it has none or no valid number), so that the
	// ServicePort resolving to that port, most often the only one, serves this very array (see
	// forPort).
	Endpoints []Endpoint
	// Skipped is how many endpoints were left out because their first address does not parse
	// or is of another family; the conversion warns about them.
	Skipped int
	// TriggerTime is the endpoints.kubernetes.io/last-change-trigger-time annotation; zero
	// when it is absent or does not parse.
	TriggerTime time.Time
}

// EndpointSlicePort is one entry of an EndpointSlice's ports.
type EndpointSlicePort struct {
	Name string
	// Protocol is empty for a protocol the model does not know: such a port serves no
	// ServicePort.
	Protocol Protocol
	// Port is 0 when the slice gives no number (or a negative one).
	Port int32
}

// ParseEndpointSlice parses what the model reads of s (nil for nil). Slices of address type
// FQDN get no endpoints: no Service reads them. Node names, zones and port names are interned:
// the same few strings repeat across every slice.
func ParseEndpointSlice(s *discoveryv1.EndpointSlice) *EndpointSlice {
	if s == nil {
		return nil
	}
	out := &EndpointSlice{Namespace: s.Namespace, Name: s.Name, AddressType: s.AddressType}
	out.Owner, out.Owned = OwnerOf(s)
	if out.Owned {
		out.Owner.Namespace = out.Namespace // one copy of the string
	}
	if v, ok := s.Annotations[corev1.EndpointsLastChangeTriggerTime]; ok {
		if at, err := time.Parse(time.RFC3339Nano, v); err == nil {
			out.TriggerTime = at
		}
	}
	if len(s.Ports) > 0 {
		out.Ports = make([]EndpointSlicePort, len(s.Ports))
	}
	for i, p := range s.Ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		mp, _ := protocolOf(proto)
		ep := EndpointSlicePort{Protocol: mp}
		if p.Name != nil {
			ep.Name = intern(*p.Name)
		}
		if p.Port != nil && *p.Port > 0 {
			ep.Port = *p.Port
		}
		out.Ports[i] = ep
	}
	if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
		return out
	}
	var port uint16
	if len(out.Ports) > 0 && out.Ports[0].Port <= annotation.MaxPort {
		port = uint16(out.Ports[0].Port)
	}
	eps := make([]Endpoint, 0, len(s.Endpoints))
	for i := range s.Endpoints {
		ep, ok := parseEndpoint(&s.Endpoints[i], s.AddressType)
		if !ok {
			out.Skipped++
			continue
		}
		ep.Port = port
		eps = append(eps, ep)
	}
	// Stable, so that of the copies of one address the first ready one, else the first, is kept.
	slices.SortStableFunc(eps, func(a, b Endpoint) int { return a.Addr.Compare(b.Addr) })
	kept := eps[:0]
	for i := 0; i < len(eps); {
		j, pick := i+1, i
		for ; j < len(eps) && eps[j].Addr == eps[i].Addr; j++ {
			if eps[j].Ready && !eps[pick].Ready {
				pick = j
			}
		}
		kept = append(kept, eps[pick])
		i = j
	}
	switch {
	case len(kept) == 0:
	case len(kept) < cap(eps):
		out.Endpoints = slices.Clone(kept) // the kept array has no room left unused
	default:
		out.Endpoints = kept
	}
	return out
}

// intern returns unique.Make's canonical copy of s: node names, zones and port names repeat
// across thousands of endpoints, which then share a few copies instead of holding one each.
// unique holds its copies weakly (we keep the string, not the handle), so after a GC the same
// string may get a new copy: a few per GC cycle, still not one per endpoint.
func intern(s string) string {
	if s == "" {
		return ""
	}
	return unique.Make(s).Value()
}

// counted reports whether kube-proxy counts events of s: slices of a Service, of the address
// families it programs (FQDN slices are ignored as they are by the model).
func (s *EndpointSlice) counted() bool {
	return s.Owned && (s.AddressType == discoveryv1.AddressTypeIPv4 || s.AddressType == discoveryv1.AddressTypeIPv6)
}

// equal reports whether s and o say the same (an update of o to s changes nothing the model
// reads).
func (s *EndpointSlice) equal(o *EndpointSlice) bool {
	return s.Namespace == o.Namespace && s.Name == o.Name && s.Owner == o.Owner && s.Owned == o.Owned &&
		s.AddressType == o.AddressType && s.Skipped == o.Skipped && s.TriggerTime.Equal(o.TriggerTime) &&
		slices.Equal(s.Ports, o.Ports) && slices.EqualFunc(s.Endpoints, o.Endpoints, endpointEqual)
}

func endpointEqual(a, b Endpoint) bool {
	return a.Addr == b.Addr && a.Port == b.Port && a.Ready == b.Ready && a.Serving == b.Serving &&
		a.Terminating == b.Terminating && a.where == b.where
}

// endpointSet is every usable EndpointSlice of one Service.
type endpointSet struct {
	slices   []*EndpointSlice
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

// collectEndpoints picks the slices of Service key in the wanted address families. Slices are
// taken in name order so that the result does not depend on the caller's order. Endpoints whose
// first address does not parse or is of the wrong family were skipped by ParseEndpointSlice;
// they are counted in a warning here.
func collectEndpoints(key ServiceKey, slices []*EndpointSlice, families map[discoveryv1.AddressType]bool) endpointSet {
	var set endpointSet
	for _, s := range slices {
		if s != nil && s.Owned && s.Owner == key && families[s.AddressType] {
			set.slices = append(set.slices, s)
		}
	}
	sort.Slice(set.slices, func(i, j int) bool { return set.slices[i].Name < set.slices[j].Name })
	for _, s := range set.slices {
		if s.Skipped > 0 {
			set.warnings = append(set.warnings, fmt.Sprintf(
				"EndpointSlice %s/%s: skipped %d endpoint(s) whose first address is not an %s address",
				s.Namespace, s.Name, s.Skipped, s.AddressType))
		}
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
	var t Topology
	if e.NodeName != nil {
		t.NodeName = *e.NodeName
	}
	if e.Zone != nil {
		t.Zone = *e.Zone
	}
	if e.Hints != nil && len(e.Hints.ForZones) > 0 {
		zs := make([]string, len(e.Hints.ForZones))
		for i, z := range e.Hints.ForZones {
			zs[i] = z.Name
		}
		t.Hints = strings.Join(zs, ",")
	}
	if e.Hints != nil && len(e.Hints.ForNodes) > 0 {
		ns := make([]string, len(e.Hints.ForNodes))
		for i, n := range e.Hints.ForNodes {
			ns[i] = n.Name
		}
		t.NodeHints = strings.Join(ns, ",")
	}
	return ep.in(t), true
}

// slicePort finds the port of a slice that serves sp and returns the endpoint port to use.
// EndpointSlice ports carry the Service port's name and the resolved target port, so named
// targetPorts are resolved here, per slice. An all-ports ServicePort uses any slice port of its
// protocol, one without a port number included (the EndpointSlice API's "all ports"), and every
// slice that lists no ports at all: KEP-2610's EndpointSlice of an all-ports Service has none,
// and a slice without ports can only mean "every port" for a Service that forwards every port.
func slicePort(ports []EndpointSlicePort, sp *ServicePort) (uint16, bool) {
	if sp.AllPorts && len(ports) == 0 {
		return 0, true
	}
	for _, p := range ports {
		if p.Protocol == "" || p.Protocol != sp.Name.Protocol {
			continue
		}
		if sp.AllPorts {
			return 0, true
		}
		if p.Name != sp.Name.Port {
			continue
		}
		if sp.KeepsPort() {
			return 0, true
		}
		if p.Port < 1 || p.Port > annotation.MaxPort {
			return 0, false
		}
		return uint16(p.Port), true
	}
	return 0, false
}

type epKey struct {
	addr netip.Addr
	port uint16
}

// forPort returns the endpoints of one ServicePort, deduplicated by address and port (a ready
// copy wins over a not-ready one, as an endpoint may briefly sit in two slices) and sorted.
// The result is shared and must not be modified: when one slice serves the port, which is the
// common case, it is that slice's own array if its endpoints already carry the port, and a
// copy with the port set otherwise.
func (s endpointSet) forPort(sp *ServicePort) []Endpoint {
	var (
		only     *EndpointSlice
		onlyPort uint16
		n, users int
	)
	for _, es := range s.slices {
		if port, ok := slicePort(es.Ports, sp); ok {
			only, onlyPort = es, port
			n += len(es.Endpoints)
			users++
		}
	}
	if n == 0 {
		return nil
	}
	if users == 1 {
		// A slice's endpoints are already one per address and sorted.
		if only.Endpoints[0].Port == onlyPort {
			return only.Endpoints
		}
		out := slices.Clone(only.Endpoints)
		for i := range out {
			out[i].Port = onlyPort
		}
		return out
	}
	// Sized once: the model keeps this slice, and append's doubling left ~40% of every
	// Service's endpoints unused (10 endpoints took room for 16).
	out := make([]Endpoint, 0, n)
	index := make(map[epKey]int, n)
	for _, es := range s.slices {
		port, ok := slicePort(es.Ports, sp)
		if !ok {
			continue
		}
		for _, ep := range es.Endpoints {
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
	return slices.Clip(out)
}
