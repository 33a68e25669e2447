package model

import (
	"reflect"
	"slices"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/proxy/annotation"
)

func TestParseEndpointSlice(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	http := []discoveryv1.EndpointPort{slicePortFixture("http", 8080)}
	twoPorts := []discoveryv1.EndpointPort{slicePortFixture("http", 8080), slicePortFixture("metrics", 9100)}
	ready := func(a string, port uint16) Endpoint {
		return Endpoint{Addr: addr(a), Port: port, Ready: true, Serving: true}
	}
	tests := []struct {
		name    string
		slice   *discoveryv1.EndpointSlice
		want    []Endpoint
		skipped int
	}{
		{name: "sorted, with the slice's one port", slice: sliceFixture("a-1", "a", v4, http,
			epFixture{addr: "10.244.0.2"}, epFixture{addr: "10.244.0.1"}),
			want: []Endpoint{ready("10.244.0.1", 8080), ready("10.244.0.2", 8080)}},
		{name: "two ports: the first one's", slice: sliceFixture("a-1", "a", v4, twoPorts, epFixture{addr: "10.244.0.1"}),
			want: []Endpoint{ready("10.244.0.1", 8080)}},
		{name: "no ports: no port", slice: sliceFixture("a-1", "a", v4, nil, epFixture{addr: "10.244.0.1"}),
			want: []Endpoint{ready("10.244.0.1", 0)}},
		{name: "one address kept once, the first ready copy wins", slice: sliceFixture("a-1", "a", v4, http,
			epFixture{addr: "10.244.0.1", ready: ptr(false)},
			epFixture{addr: "10.244.0.1", node: "n1"},
			epFixture{addr: "10.244.0.1", node: "n2"}),
			want: []Endpoint{Endpoint{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true}.At("n1", "")}},
		{name: "bad addresses counted", slice: sliceFixture("a-1", "a", v4, http,
			epFixture{addr: "nope"}, epFixture{addr: "fd00:244::1"}, epFixture{addr: "10.244.0.1"}),
			want: []Endpoint{ready("10.244.0.1", 8080)}, skipped: 2},
		{name: "FQDN slices have no endpoints", slice: sliceFixture("a-1", "a", discoveryv1.AddressTypeFQDN, http,
			epFixture{addr: "web.example"}),
			want: nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ParseEndpointSlice(tc.slice)
			if !reflect.DeepEqual(got.Endpoints, tc.want) || got.Skipped != tc.skipped {
				t.Fatalf("endpoints %+v, skipped %d; want %+v, %d", got.Endpoints, got.Skipped, tc.want, tc.skipped)
			}
			if len(got.Endpoints) != cap(got.Endpoints) {
				t.Fatalf("endpoints: len %d, cap %d; want no unused room", len(got.Endpoints), cap(got.Endpoints))
			}
			if !got.Owned || got.Owner != keyOf("a") {
				t.Fatalf("owner %v, %v; want ns/a", got.Owner, got.Owned)
			}
		})
	}
	t.Run("zone and node hints", func(t *testing.T) {
		s := sliceFixture("a-1", "a", v4, http, epFixture{addr: "10.244.0.1", node: "n1", zone: "z1"})
		s.Endpoints[0].Hints.ForZones = append(s.Endpoints[0].Hints.ForZones, discoveryv1.ForZone{Name: "z2"})
		s.Endpoints[0].Hints.ForNodes = []discoveryv1.ForNode{{Name: "n1"}, {Name: "n2"}}
		ep := ParseEndpointSlice(s).Endpoints[0]
		if !slices.Equal(ep.ZoneHints(), []string{"z1", "z2"}) || !slices.Equal(ep.NodeHints(), []string{"n1", "n2"}) {
			t.Fatalf("hints: zones %q nodes %q; want [z1 z2] and [n1 n2]", ep.ZoneHints(), ep.NodeHints())
		}
		s.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForNodes: []discoveryv1.ForNode{{Name: "n1"}}}
		if ep := ParseEndpointSlice(s).Endpoints[0]; ep.ZoneHints() != nil || !slices.Equal(ep.NodeHints(), []string{"n1"}) {
			t.Fatalf("node hints only: zones %q nodes %q; want none and [n1]", ep.ZoneHints(), ep.NodeHints())
		}
	})
	t.Run("trigger time", func(t *testing.T) {
		s := sliceFixture("a-1", "a", v4, http)
		s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-01T00:00:01.5Z"}
		if got, want := ParseEndpointSlice(s).TriggerTime, t0.Add(1500*time.Millisecond); !got.Equal(want) {
			t.Fatalf("trigger time %v; want %v", got, want)
		}
		s.Annotations[corev1.EndpointsLastChangeTriggerTime] = "yesterday"
		if got := ParseEndpointSlice(s).TriggerTime; !got.IsZero() {
			t.Fatalf("trigger time %v; want zero for an annotation that does not parse", got)
		}
	})
}

// The endpoints of a ServicePort that one slice serves on the slice's own port are the slice's
// array, shared; every other ServicePort gets a copy with its own port, and the slice's array
// is never written to (the Tracker keeps it for later conversions, and published models hold it).
func TestEndpointsShareTheSliceArray(t *testing.T) {
	v4 := discoveryv1.AddressTypeIPv4
	one := ParseEndpointSlice(sliceFixture("a-1", "a", v4, []discoveryv1.EndpointPort{slicePortFixture("http", 8080)},
		epFixture{addr: "10.244.0.1"}, epFixture{addr: "10.244.0.2"}))
	both := ParseEndpointSlice(sliceFixture("a-2", "a", v4,
		[]discoveryv1.EndpointPort{slicePortFixture("http", 8080), slicePortFixture("metrics", 9100)}, epFixture{addr: "10.244.0.3"}))
	svc := svcFixture("a", withPorts(tcpPort("http", 80, intstr.FromInt32(8080)), tcpPort("metrics", 91, intstr.FromInt32(9100))))
	ranged := svcFixture("a", withPorts(tcpPort("http", 8080, intstr.IntOrString{})), annotate(annotation.PortRangesKey, "http=8080-8090"))

	t.Run("one slice on its own port", func(t *testing.T) {
		conv := fromService(svc, []*EndpointSlice{one})
		eps := conv.Service.Ports[0].Endpoints
		if len(eps) != 2 || &eps[0] != &one.Endpoints[0] {
			t.Fatalf("http endpoints %+v; want the slice's own array", eps)
		}
	})
	t.Run("a range keeps the port: a copy", func(t *testing.T) {
		conv := fromService(ranged, []*EndpointSlice{one})
		eps := conv.Service.Ports[0].Endpoints
		if len(eps) != 2 || &eps[0] == &one.Endpoints[0] || eps[0].Port != 0 || eps[1].Port != 0 {
			t.Fatalf("range endpoints %+v; want a copy with port 0", eps)
		}
	})
	t.Run("a slice of two ports: shared by the first, copied for the second", func(t *testing.T) {
		conv := fromService(svc, []*EndpointSlice{both})
		http, metrics := conv.Service.Ports[0].Endpoints, conv.Service.Ports[1].Endpoints
		if len(http) != 1 || http[0].Port != 8080 || len(metrics) != 1 || metrics[0].Port != 9100 {
			t.Fatalf("endpoints http %+v, metrics %+v; want 10.244.0.3 on 8080 and on 9100", http, metrics)
		}
		if &http[0] != &both.Endpoints[0] || &metrics[0] == &both.Endpoints[0] {
			t.Fatalf("http shares the slice's array: %v, metrics: %v; want true, false", &http[0] == &both.Endpoints[0], &metrics[0] == &both.Endpoints[0])
		}
	})
	t.Run("two slices: merged", func(t *testing.T) {
		conv := fromService(svc, []*EndpointSlice{both, one})
		http := conv.Service.Ports[0].Endpoints
		want := []Endpoint{{Addr: addr("10.244.0.1"), Port: 8080, Ready: true, Serving: true},
			{Addr: addr("10.244.0.2"), Port: 8080, Ready: true, Serving: true},
			{Addr: addr("10.244.0.3"), Port: 8080, Ready: true, Serving: true}}
		if !reflect.DeepEqual(http, want) {
			t.Fatalf("http endpoints %+v; want %+v", http, want)
		}
	})
	for _, s := range []*EndpointSlice{one, both} {
		for _, ep := range s.Endpoints {
			if ep.Port != 8080 {
				t.Fatalf("slice %s endpoint %v has port %d after the conversions; want 8080 (written to)", s.Name, ep.Addr, ep.Port)
			}
		}
	}
}

// An endpoint change reconverts the Service that owns the slice, and only it, and leaves the
// model published before it as it was.
func TestTrackerEndpointChangeReconverts(t *testing.T) {
	tr := newTestTracker(&recorder{})
	port := []discoveryv1.EndpointPort{slicePortFixture("http", 8080)}
	tr.UpsertService(svcFixture("a"))
	tr.UpsertService(svcFixture("b", onIP("10.96.0.11", "192.0.2.11")))
	tr.UpsertEndpointSlice(sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4, port, epFixture{addr: "10.244.0.1"}))
	tr.UpsertEndpointSlice(sliceFixture("b-1", "b", discoveryv1.AddressTypeIPv4, port, epFixture{addr: "10.244.0.2"}))
	tr.TakeChanges()
	before := tr.Snapshot()

	tr.UpsertEndpointSlice(sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4, port, epFixture{addr: "10.244.0.9"}))
	if ch := tr.TakeChanges(); !reflect.DeepEqual(ch.Services, []ServiceKey{keyOf("a")}) {
		t.Fatalf("changed %v; want only ns/a", ch.Services)
	}
	if got := tr.Service(keyOf("a")).Ports[0].Endpoints; len(got) != 1 || got[0].Addr != addr("10.244.0.9") || got[0].Port != 8080 {
		t.Fatalf("a's endpoints %+v; want 10.244.0.9:8080", got)
	}
	if got := before.Services[keyOf("a")].Ports[0].Endpoints; len(got) != 1 || got[0].Addr != addr("10.244.0.1") {
		t.Fatalf("the earlier snapshot's endpoints of a became %+v; want 10.244.0.1 still", got)
	}
	if tr.Service(keyOf("b")) != before.Services[keyOf("b")] {
		t.Fatalf("b was republished by a change of a's slice")
	}

	// The same slice again, as the model reads it (only a label the model does not read
	// differs): nothing changes, as kube-proxy compares its own parsed slices.
	again := sliceFixture("a-1", "a", discoveryv1.AddressTypeIPv4, port, epFixture{addr: "10.244.0.9"})
	again.Labels["team"] = "x"
	tr.UpsertEndpointSlice(again)
	if ch := tr.TakeChanges(); !ch.Empty() {
		t.Fatalf("changes %+v after an update the model does not read; want none", ch)
	}
}

// TestEndpointTopology: an endpoint's node, zone and hints read back as given, endpoints in one
// place share one interned value, and an Endpoint stays 40 bytes (there are 100k of them at 10k
// Services × 10 endpoints; the three strings and the hint list inline took 88).
func TestEndpointTopology(t *testing.T) {
	a := Endpoint{Port: 80}.At("node-a", "z1", "z1", "z2")
	b := Endpoint{Port: 81}.At("node-a", "z1", "z1", "z2")
	if a.NodeName() != "node-a" || a.Zone() != "z1" || !slices.Equal(a.ZoneHints(), []string{"z1", "z2"}) {
		t.Errorf("At(node-a, z1, z1, z2) reads back %q, %q, %q", a.NodeName(), a.Zone(), a.ZoneHints())
	}
	if a.where != b.where {
		t.Error("two endpoints in one place do not share their topology")
	}
	if h := a.ForNodes("node-a", "node-b"); h.NodeName() != "node-a" || h.Zone() != "z1" ||
		!slices.Equal(h.ZoneHints(), []string{"z1", "z2"}) || !slices.Equal(h.NodeHints(), []string{"node-a", "node-b"}) {
		t.Errorf("ForNodes(node-a, node-b) reads back %+v", h.Where())
	}
	if a.NodeHints() != nil {
		t.Errorf("an endpoint without node hints reads back %q", a.NodeHints())
	}
	var none Endpoint
	if none.NodeName() != "" || none.Zone() != "" || none.ZoneHints() != nil || none.At("", "") != none {
		t.Error("an endpoint placed nowhere is not the zero value")
	}
	if got := unsafe.Sizeof(Endpoint{}); got > 40 {
		t.Errorf("Endpoint is %d bytes, want at most 40", got)
	}
}
