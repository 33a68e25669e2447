package policy

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/annotation"
)

func svc(t corev1.ServiceType, opts ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"},
		Spec: corev1.ServiceSpec{Type: t, ClusterIP: "198.19.0.10"}}
	for _, o := range opts {
		o(s)
	}
	return s
}

func allocateLB(b bool) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.AllocateLoadBalancerNodePorts = &b }
}

func allPortsOn(v string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Annotations = map[string]string{annotation.AllPortsKey: v} }
}

func headless(s *corev1.Service) { s.Spec.ClusterIP = corev1.ClusterIPNone }

// TestEligibility: the rules both the controller and manifest mode apply.
func TestEligibility(t *testing.T) {
	lb := corev1.ServiceTypeLoadBalancer
	for _, tt := range []struct {
		name                     string
		svc                      *corev1.Service
		has, allocates           bool
		keepsNamed, keepsUnnamed bool
	}{
		{"NodePort", svc(corev1.ServiceTypeNodePort), true, true, true, true},
		{"LoadBalancer", svc(lb), true, true, true, true},
		{"LoadBalancer allocating", svc(lb, allocateLB(true)), true, true, true, true},
		{"LoadBalancer not allocating (KEP-1864)", svc(lb, allocateLB(false)), true, false, true, false},
		{"ClusterIP", svc(corev1.ServiceTypeClusterIP), false, false, false, false},
		{"headless NodePort", svc(corev1.ServiceTypeNodePort, headless), false, false, false, false},
		{"all-ports LoadBalancer (KEP-2610)", svc(lb, allPortsOn("true")), false, false, false, false},
		{"all-ports false", svc(lb, allPortsOn("false")), true, true, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := []bool{HasNodePorts(tt.svc), AllocatesNew(tt.svc), KeepsHeld(tt.svc, true), KeepsHeld(tt.svc, false)}
			want := []bool{tt.has, tt.allocates, tt.keepsNamed, tt.keepsUnnamed}
			for i, what := range []string{"HasNodePorts", "AllocatesNew", "KeepsHeld(named)", "KeepsHeld(unnamed)"} {
				if got[i] != want[i] {
					t.Errorf("%s = %v, want %v", what, got[i], want[i])
				}
			}
		})
	}
}

func TestHolderOf(t *testing.T) {
	for owner, want := range map[string]string{
		BlockOwner("ns/a", "rtp"): "ns/a",
		"ns/a":                    "ns/a",
	} {
		if got := HolderOf(owner); got != want {
			t.Errorf("HolderOf(%q) = %q, want %q", owner, got, want)
		}
	}
}

// TestRefusals: each refusal has its stable reason, unwraps to its cause, and names the holder.
func TestRefusals(t *testing.T) {
	blocks := allocator.MustParseRange(DefaultBlockRange)
	b := allocator.MustParseRange("20000-20009")
	other := allocator.MustParseRange("20005-20014")
	own := annotation.PortRange{Name: "rtp", Start: 20000, End: 20009}
	for _, tt := range []struct {
		name, reason, holder, says string
		r                          *Refusal
		is                         error
	}{
		{"shifted", ReasonShifted, "", "rtp=20000-20009",
			Shifted(own, annotation.PortRange{Name: "rtp", Start: 21000, End: 21009}), ErrShiftedBlock},
		{"held by another Service", ReasonConflict, "ns/old", "held by Service ns/old",
			RefuseBlock("ns/new", "rtp", b, blocks, &allocator.AllocatedError{Port: 20005, Owner: "ns/old/media", Block: &other}),
			allocator.ErrAllocated},
		{"held by the same Service", ReasonConflict, "", `this Service's own port "media"`,
			RefuseBlock("ns/new", "rtp", b, blocks, &allocator.AllocatedError{Port: 20005, Owner: "ns/new/media", Block: &other}),
			allocator.ErrAllocated},
		{"outside the block range", ReasonOutOfRange, "", "outside the block range 20000-29999",
			RefuseBlock("ns/new", "rtp", b, blocks, &allocator.OutOfRangeError{Request: b, Range: blocks}), allocator.ErrOutOfRange},
		{"no block range", ReasonRefused, "", "--range-node-port-range",
			RefuseBlock("ns/new", "rtp", b, allocator.Range{}, ErrNoBlockRange), ErrNoBlockRange},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.r.Reason != tt.reason || tt.r.Holder != tt.holder || !errors.Is(tt.r, tt.is) || !strings.Contains(tt.r.Error(), tt.says) {
				t.Errorf("got reason %q holder %q is(%v)=%v message %q; want reason %q holder %q, a message containing %q",
					tt.r.Reason, tt.r.Holder, tt.is, errors.Is(tt.r, tt.is), tt.r.Error(), tt.reason, tt.holder, tt.says)
			}
		})
	}
}
