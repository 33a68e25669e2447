package controller

import (
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stesting "k8s.io/client-go/testing"
)

// TestStartUp gives a fresh leader a set of Services and checks what each ends up recording,
// which Events are sent and what the allocator holds.
func TestStartUp(t *testing.T) {
	cases := []struct {
		name   string
		cfg    Config
		svcs   []*corev1.Service
		want   map[string]string // node-port-ranges per Service, "-" absent
		events []string          // "ns/name reason [related]", sorted
		blocks string
	}{
		{
			name:   "a NodePort range Service gets its identity block",
			svcs:   []*corev1.Service{svc("rtp", 0, "rtp=16384-16483")},
			want:   map[string]string{"rtp": "rtp=16384-16483"},
			blocks: "16384-16483 voip/rtp/rtp",
		},
		{
			name:   "several ranged ports are recorded in spec order, single ports get nothing",
			svcs:   []*corev1.Service{svc("media", 0, "video=20000-20099,audio=16384-16483", withPort("sip", 5060))},
			want:   map[string]string{"media": "video=20000-20099,audio=16384-16483"},
			blocks: "16384-16483 voip/media/audio, 20000-20099 voip/media/video",
		},
		{
			name:   "a LoadBalancer Service gets a block by default",
			svcs:   []*corev1.Service{svc("lb", 0, "rtp=16384-16393", loadBalancer(nil))},
			want:   map[string]string{"lb": "rtp=16384-16393"},
			blocks: "16384-16393 voip/lb/rtp",
		},
		{
			name: "KEP-1864: allocateLoadBalancerNodePorts false gets no new block, a recorded one is kept",
			svcs: []*corev1.Service{
				svc("new", 0, "rtp=16384-16393", loadBalancer(noAllocation)),
				svc("kept", 1, "rtp=17000-17009", loadBalancer(noAllocation), recordedAs("rtp=17000-17009")),
			},
			want:   map[string]string{"new": "-", "kept": "rtp=17000-17009"},
			blocks: "17000-17009 voip/kept/rtp",
		},
		{
			name: "ClusterIP Services hold nothing and a stale record is removed",
			svcs: []*corev1.Service{
				svc("plain", 0, "rtp=16384-16393", ofType(corev1.ServiceTypeClusterIP)),
				svc("stale", 1, "rtp=17000-17009", ofType(corev1.ServiceTypeClusterIP), recordedAs("rtp=17000-17009")),
			},
			want: map[string]string{"plain": "-", "stale": "-"},
		},
		{
			// KEP-2610: all-ports never gets node ports; the proxies reject all-ports with
			// port-ranges, and the block is not held meanwhile (as in manifest mode).
			name: "an all-ports Service holds no block and a stale record is removed",
			svcs: []*corev1.Service{svc("any", 0, "rtp=16384-16393", loadBalancer(nil), allPorts,
				recordedAs("rtp=16384-16393"))},
			want: map[string]string{"any": "-"},
		},
		{
			name:   "a user-written identity block is a static request, kept as written",
			svcs:   []*corev1.Service{svc("static", 0, "rtp=16384-16393", recordedAs("rtp=16384-16393"))},
			want:   map[string]string{"static": "rtp=16384-16393"},
			blocks: "16384-16393 voip/static/rtp",
		},
		{
			name:   "a shifted block is refused with an Event and replaced by the identity block",
			svcs:   []*corev1.Service{svc("shifted", 0, "rtp=16384-16393", recordedAs("rtp=40000-40009"))},
			want:   map[string]string{"shifted": "rtp=16384-16393"},
			events: []string{"voip/shifted NodePortBlockShifted"},
			blocks: "16384-16393 voip/shifted/rtp",
		},
		{
			name:   "a shifted block on a LoadBalancer that allocates nothing is removed",
			svcs:   []*corev1.Service{svc("shifted", 0, "rtp=16384-16393", loadBalancer(noAllocation), recordedAs("rtp=40000-40009"))},
			want:   map[string]string{"shifted": "-"},
			events: []string{"voip/shifted NodePortBlockShifted"},
		},
		{
			name:   "a range outside the block range gets no block and an Event",
			svcs:   []*corev1.Service{svc("high", 0, "rtp=40000-40009")},
			want:   map[string]string{"high": "-"},
			events: []string{"voip/high NodePortBlockOutOfRange"},
		},
		{
			name: "two new Services want overlapping blocks: the older gets it, the newer an Event naming it",
			svcs: []*corev1.Service{
				svc("newer", 5, "rtp=16390-16399"),
				svc("older", 1, "rtp=16384-16393"),
			},
			want:   map[string]string{"older": "rtp=16384-16393", "newer": "-"},
			events: []string{"voip/newer NodePortBlockConflict voip/older"},
			blocks: "16384-16393 voip/older/rtp",
		},
		{
			name: "both record overlapping blocks (a deposed leader's write): the older keeps it, the newer's entry goes",
			svcs: []*corev1.Service{
				svc("newer", 5, "rtp=16390-16399", recordedAs("rtp=16390-16399")),
				svc("older", 1, "rtp=16384-16393", recordedAs("rtp=16384-16393")),
			},
			want:   map[string]string{"older": "rtp=16384-16393", "newer": "-"},
			events: []string{"voip/newer NodePortBlockConflict voip/older"},
			blocks: "16384-16393 voip/older/rtp",
		},
		{
			name: "a recorded holder keeps its block against an older Service that only asks",
			svcs: []*corev1.Service{
				svc("holder", 5, "rtp=16390-16399", recordedAs("rtp=16390-16399")),
				svc("asker", 1, "rtp=16384-16393"),
			},
			want:   map[string]string{"holder": "rtp=16390-16399", "asker": "-"},
			events: []string{"voip/asker NodePortBlockConflict voip/holder"},
			blocks: "16390-16399 voip/holder/rtp",
		},
		{
			name:   "a node-port-ranges value that does not parse is reported and left as written",
			svcs:   []*corev1.Service{svc("typo", 0, "rtp=16384-16393", recordedAs("rtp=16384"))},
			want:   map[string]string{"typo": "rtp=16384"},
			events: []string{"voip/typo NodePortRangesInvalid"},
		},
		{
			name: "a port-ranges value the proxies reject keeps its recorded block and changes nothing",
			svcs: []*corev1.Service{svc("broken", 0, "rtp=16384-16393", recordedAs("rtp=16384-16393"),
				func(s *corev1.Service) { s.Annotations["nftproxy.io/port-ranges"] = "rtp=16384-16393,nope=1-2" })},
			want:   map[string]string{"broken": "rtp=16384-16393"},
			blocks: "16384-16393 voip/broken/rtp",
		},
		{
			name: "two ports of one Service with the same range (TCP and UDP) share one block",
			svcs: []*corev1.Service{svc("both", 0, "", func(s *corev1.Service) {
				s.Spec.Ports = []corev1.ServicePort{
					{Name: "rtp-udp", Protocol: corev1.ProtocolUDP, Port: 16384},
					{Name: "rtp-tcp", Protocol: corev1.ProtocolTCP, Port: 16384},
				}
				s.Annotations["nftproxy.io/port-ranges"] = "rtp-udp=16384-16393,rtp-tcp=16384-16393"
			})},
			want:   map[string]string{"both": "rtp-udp=16384-16393,rtp-tcp=16384-16393"},
			blocks: "16384-16393 voip/both/rtp-udp",
		},
		{
			name: "only Services of this proxy name are handled",
			cfg:  Config{ProxyName: "nftproxy"},
			svcs: []*corev1.Service{
				svc("ours", 0, "rtp=16384-16393", labelled("nftproxy")),
				svc("theirs", 1, "rtp=17000-17009"),
			},
			want:   map[string]string{"ours": "rtp=16384-16393", "theirs": "-"},
			blocks: "16384-16393 voip/ours/rtp",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, tc.cfg, tc.svcs...)
			if got := h.recorded(slices.Collect(maps.Keys(tc.want))...); !maps.Equal(got, tc.want) {
				t.Errorf("annotations: got %v, want %v", got, tc.want)
			}
			if got := h.rec.summary(); !slices.Equal(got, tc.events) {
				t.Errorf("events: got %q, want %q", got, tc.events)
			}
			if got := h.blocks(); got != tc.blocks {
				t.Errorf("allocator: got %q, want %q", got, tc.blocks)
			}
		})
	}
}

// TestRebuildWritesNothing: a leader that finds every block recorded rebuilds exactly those
// blocks and sends no write (a takeover does not churn Services).
func TestRebuildWritesNothing(t *testing.T) {
	h := start(t, Config{},
		svc("a", 0, "rtp=16384-16483", recordedAs("rtp=16384-16483")),
		svc("b", 1, "rtp=20000-20009,sip=5060-5069", recordedAs("rtp=20000-20009,sip=5060-5069")),
		svc("c", 2, "rtp=17000-17009", loadBalancer(noAllocation), recordedAs("rtp=17000-17009")),
	)
	if n := h.patches(); n != 0 {
		t.Errorf("patches sent on rebuild: got %d, want 0", n)
	}
	want := "5060-5069 voip/b/sip, 16384-16483 voip/a/rtp, 17000-17009 voip/c/rtp, 20000-20009 voip/b/rtp"
	if got := h.blocks(); got != want {
		t.Errorf("rebuilt allocator: got %q, want %q", got, want)
	}
}

// TestSteps changes Services one step at a time and checks the records after each step.
func TestSteps(t *testing.T) {
	type step struct {
		do     func(h *harness)
		want   map[string]string
		events []string
		blocks string
	}
	cases := []struct {
		name  string
		start []*corev1.Service
		steps []step
	}{
		{
			name:  "deleting the holder gives the block to the waiting Service",
			start: []*corev1.Service{svc("holder", 0, "rtp=16384-16393"), svc("waiter", 1, "rtp=16390-16399")},
			steps: []step{
				{do: func(*harness) {}, want: map[string]string{"holder": "rtp=16384-16393", "waiter": "-"},
					events: []string{"voip/waiter NodePortBlockConflict voip/holder"}, blocks: "16384-16393 voip/holder/rtp"},
				{do: func(h *harness) { h.delete("holder") }, want: map[string]string{"waiter": "rtp=16390-16399"},
					blocks: "16390-16399 voip/waiter/rtp"},
			},
		},
		{
			name:  "a type change to ClusterIP releases the block and removes the record",
			start: []*corev1.Service{svc("a", 0, "rtp=16384-16393")},
			steps: []step{
				{do: func(h *harness) {
					s := h.get("a")
					s.Spec.Type = corev1.ServiceTypeClusterIP
					h.apply(s)
				}, want: map[string]string{"a": "-"}},
				{do: func(h *harness) { h.apply(svc("b", 1, "rtp=16384-16393")) },
					want: map[string]string{"a": "-", "b": "rtp=16384-16393"}, blocks: "16384-16393 voip/b/rtp"},
			},
		},
		{
			name:  "dropping the range releases the block and removes the record",
			start: []*corev1.Service{svc("a", 0, "rtp=16384-16393")},
			steps: []step{{do: func(h *harness) {
				s := h.get("a")
				delete(s.Annotations, "nftproxy.io/port-ranges")
				h.apply(s)
			}, want: map[string]string{"a": "-"}}},
		},
		{
			name:  "moving the range moves the block",
			start: []*corev1.Service{svc("a", 0, "rtp=16384-16393")},
			steps: []step{{do: func(h *harness) {
				s := h.get("a")
				s.Annotations["nftproxy.io/port-ranges"] = "rtp=18000-18019"
				s.Spec.Ports[0].Port = 18000
				h.apply(s)
			}, want: map[string]string{"a": "rtp=18000-18019"}, blocks: "18000-18019 voip/a/rtp"}},
		},
		{
			name:  "KEP-1864: turning allocation off keeps the block until the user removes the record",
			start: []*corev1.Service{svc("lb", 0, "rtp=16384-16393", loadBalancer(nil))},
			steps: []step{
				{do: func(h *harness) {
					s := h.get("lb")
					s.Spec.AllocateLoadBalancerNodePorts = noAllocation
					h.apply(s)
				}, want: map[string]string{"lb": "rtp=16384-16393"}, blocks: "16384-16393 voip/lb/rtp"},
				{do: func(h *harness) {
					s := h.get("lb")
					delete(s.Annotations, "nftproxy.io/node-port-ranges")
					h.apply(s)
				}, want: map[string]string{"lb": "-"}},
			},
		},
		{
			name:  "a record removed by hand on a Service that allocates is written again",
			start: []*corev1.Service{svc("a", 0, "rtp=16384-16393")},
			steps: []step{{do: func(h *harness) {
				s := h.get("a")
				delete(s.Annotations, "nftproxy.io/node-port-ranges")
				h.apply(s)
			}, want: map[string]string{"a": "rtp=16384-16393"}, blocks: "16384-16393 voip/a/rtp"}},
		},
		{
			name:  "an older Service that records a held block takes it; the newer holder loses its entry",
			start: []*corev1.Service{svc("newer", 5, "rtp=16384-16393"), svc("older", 1, "rtp=16390-16399", ofType(corev1.ServiceTypeClusterIP))},
			steps: []step{{do: func(h *harness) {
				s := h.get("older")
				s.Spec.Type = corev1.ServiceTypeNodePort
				s.Annotations["nftproxy.io/node-port-ranges"] = "rtp=16390-16399"
				h.apply(s)
			}, want: map[string]string{"older": "rtp=16390-16399", "newer": "-"},
				events: []string{"voip/newer NodePortBlockConflict voip/older"}, blocks: "16390-16399 voip/older/rtp"}},
		},
		{
			name:  "a Service deleted and created again under its name starts afresh",
			start: []*corev1.Service{svc("a", 0, "rtp=16384-16393")},
			steps: []step{{do: func(h *harness) {
				h.delete("a")
				s := svc("a", 9, "rtp=17000-17009")
				s.UID = "uid-a-2"
				h.apply(s)
			}, want: map[string]string{"a": "rtp=17000-17009"}, blocks: "17000-17009 voip/a/rtp"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, Config{}, tc.start...)
			for i, st := range tc.steps {
				if i > 0 || len(tc.steps[0].events) == 0 {
					h.rec.reset()
				}
				st.do(h)
				if got := h.recorded(slices.Collect(maps.Keys(st.want))...); !maps.Equal(got, st.want) {
					t.Errorf("step %d: annotations: got %v, want %v", i, got, st.want)
				}
				if got := h.rec.summary(); !slices.Equal(got, st.events) {
					t.Errorf("step %d: events: got %q, want %q", i, got, st.events)
				}
				if got := h.blocks(); got != st.blocks {
					t.Errorf("step %d: allocator: got %q, want %q", i, got, st.blocks)
				}
				h.rec.reset()
			}
		})
	}
}

// TestEventsOncePerProblem: processing a refused Service again sends no second Event.
func TestEventsOncePerProblem(t *testing.T) {
	h := start(t, Config{}, svc("a", 0, "rtp=16384-16393"), svc("b", 1, "rtp=16384-16393"))
	for range 3 {
		h.s.queue.Add("voip/b")
		h.drain()
	}
	want := []string{"voip/b NodePortBlockConflict voip/a"}
	if got := h.rec.summary(); !slices.Equal(got, want) {
		t.Errorf("events: got %q, want %q", got, want)
	}
}

// TestFailedWriteReleases: a block whose annotation could not be written is not kept, so a
// controller that cannot write never fills the range with blocks nobody knows about.
func TestFailedWriteReleases(t *testing.T) {
	h := start(t, Config{})
	h.client.PrependReactor("patch", "services", func(k8stesting.Action) (bool, runtimeObject, error) {
		return true, nil, errForbidden
	})
	if _, err := h.client.CoreV1().Services("voip").Create(h.ctx, svc("a", 0, "rtp=16384-16393"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.waitSynced()
	err := h.s.process(h.ctx, "voip/a")
	if err == nil || !strings.Contains(err.Error(), "patch on services") {
		t.Errorf("process with a failing write: got error %v, want one that names the missing permission", err)
	}
	if got := h.blocks(); got != "" {
		t.Errorf("allocator after a failed write: got %q, want empty", got)
	}
	h.client.ReactionChain = h.client.ReactionChain[1:]
	if err := h.s.process(h.ctx, "voip/a"); err != nil {
		t.Fatalf("process once writes work: %v", err)
	}
	h.waitSynced()
	if got, want := h.recorded("a")["a"], "rtp=16384-16393"; got != want {
		t.Errorf("annotation after retry: got %q, want %q", got, want)
	}
}
