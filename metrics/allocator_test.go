package metrics

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nftproxy/nftproxy/allocator"
)

func TestAllocatorMetrics(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, a *allocator.Allocator)
		want string
	}{
		{
			name: "fresh allocator",
			run:  func(t *testing.T, a *allocator.Allocator) {},
			want: `
nftproxy_nodeport_allocator_allocated_ports 0
nftproxy_nodeport_allocator_available_ports 201
nftproxy_nodeport_allocator_allocation_total{scope="dynamic"} 0
nftproxy_nodeport_allocator_allocation_total{scope="static"} 0
nftproxy_nodeport_allocator_allocation_errors_total{scope="dynamic"} 0
nftproxy_nodeport_allocator_allocation_errors_total{scope="static"} 0
`,
		},
		{
			name: "mixed requests",
			run: func(t *testing.T, a *allocator.Allocator) {
				mustNoErr(t, a.AllocatePort(32570, "ns/a"))
				_, err := a.AllocateBlockAt(32700, 10, "ns/c") // a block counts as one request
				mustNoErr(t, err)
				_, err = a.Allocate("ns/b")
				mustNoErr(t, err)
				mustErr(t, a.AllocatePort(32570, "ns/d"), allocator.ErrAllocated)
				mustErr(t, a.AllocatePort(80, "ns/d"), allocator.ErrOutOfRange)
				_, err = a.AllocateBlockAt(32750, 0, "ns/e")
				mustErr(t, err, allocator.ErrInvalidWidth)
			},
			want: `
nftproxy_nodeport_allocator_allocated_ports 12
nftproxy_nodeport_allocator_available_ports 189
nftproxy_nodeport_allocator_allocation_total{scope="dynamic"} 1
nftproxy_nodeport_allocator_allocation_total{scope="static"} 2
nftproxy_nodeport_allocator_allocation_errors_total{scope="dynamic"} 0
nftproxy_nodeport_allocator_allocation_errors_total{scope="static"} 3
`,
		},
		{
			name: "release lowers the gauge, not the counters",
			run: func(t *testing.T, a *allocator.Allocator) {
				p, err := a.Allocate("ns/a")
				mustNoErr(t, err)
				b, err := a.AllocateBlockAt(32600, 20, "ns/b")
				mustNoErr(t, err)
				mustNoErr(t, a.Release(p))
				mustNoErr(t, a.ReleaseBlock(b))
			},
			want: `
nftproxy_nodeport_allocator_allocated_ports 0
nftproxy_nodeport_allocator_available_ports 201
nftproxy_nodeport_allocator_allocation_total{scope="dynamic"} 1
nftproxy_nodeport_allocator_allocation_total{scope="static"} 1
nftproxy_nodeport_allocator_allocation_errors_total{scope="dynamic"} 0
nftproxy_nodeport_allocator_allocation_errors_total{scope="static"} 0
`,
		},
		{
			name: "full range",
			run: func(t *testing.T, a *allocator.Allocator) {
				mustNoErr(t, a.Restore(allocator.Snapshot{Blocks: []allocator.BlockClaim{
					{Block: a.Range(), Owner: "ns/everything"},
				}}))
				_, err := a.Allocate("ns/late")
				mustErr(t, err, allocator.ErrFull)
			},
			want: `
nftproxy_nodeport_allocator_allocated_ports 201
nftproxy_nodeport_allocator_available_ports 0
nftproxy_nodeport_allocator_allocation_total{scope="dynamic"} 0
nftproxy_nodeport_allocator_allocation_total{scope="static"} 0
nftproxy_nodeport_allocator_allocation_errors_total{scope="dynamic"} 1
nftproxy_nodeport_allocator_allocation_errors_total{scope="static"} 0
`,
		},
	}
	header := `
# HELP nftproxy_nodeport_allocator_allocated_ports Node ports currently allocated, counting every port of a range block.
# TYPE nftproxy_nodeport_allocator_allocated_ports gauge
# HELP nftproxy_nodeport_allocator_available_ports Node ports still free in the configured range.
# TYPE nftproxy_nodeport_allocator_available_ports gauge
# HELP nftproxy_nodeport_allocator_allocation_total Successful node-port requests; scope is static (user-chosen) or dynamic (allocator-picked). A block counts once.
# TYPE nftproxy_nodeport_allocator_allocation_total counter
# HELP nftproxy_nodeport_allocator_allocation_errors_total Refused node-port requests (taken, out of range, range full, invalid width); scope is static or dynamic.
# TYPE nftproxy_nodeport_allocator_allocation_errors_total counter
`
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m, err := NewAllocatorMetrics(reg)
			if err != nil {
				t.Fatalf("NewAllocatorMetrics: %v", err)
			}
			a, err := allocator.New(allocator.MustParseRange("32567-32767"),
				allocator.WithRand(rand.New(rand.NewPCG(1, 2))), allocator.WithObserver(m))
			if err != nil {
				t.Fatalf("allocator.New: %v", err)
			}
			tt.run(t, a)
			if err := testutil.GatherAndCompare(reg, strings.NewReader(header+tt.want),
				AllocatorAllocatedPorts, AllocatorAvailablePorts,
				AllocatorAllocationTotal, AllocatorAllocationErrorsTotal); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestAllocatorMetricsRegisterTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := NewAllocatorMetrics(reg); err != nil {
		t.Fatalf("first NewAllocatorMetrics: %v", err)
	}
	_, err := NewAllocatorMetrics(reg)
	var are prometheus.AlreadyRegisteredError
	if !errors.As(err, &are) {
		t.Fatalf("second NewAllocatorMetrics error = %v; want prometheus.AlreadyRegisteredError", err)
	}
	// A failed registration must leave the registry as it was: still exactly 4 families,
	// gathered without error.
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 4 {
		t.Errorf("Gather after failed registration = %d families, %v; want 4, nil", len(mfs), err)
	}
}

func mustNoErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func mustErr(t *testing.T, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error = %v; want %v", err, want)
	}
}
