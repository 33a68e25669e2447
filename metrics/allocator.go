package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/allocator"
)

// Metric names for the node-port allocator. They are KEP-3668's kube_apiserver_nodeport_allocator_*
// names with our own namespace: the subsystem "nodeport_allocator" is kept so that a dashboard
// written for the API server's allocator needs only its prefix changed.
const (
	allocatorNamespace = "nftproxy"
	allocatorSubsystem = "nodeport_allocator"

	// AllocatorAllocatedPorts is the gauge of ports currently held (every port of a block counts).
	AllocatorAllocatedPorts = "nftproxy_nodeport_allocator_allocated_ports"
	// AllocatorAvailablePorts is the gauge of ports still free.
	AllocatorAvailablePorts = "nftproxy_nodeport_allocator_available_ports"
	// AllocatorAllocationTotal counts successful requests by scope (a block counts once).
	AllocatorAllocationTotal = "nftproxy_nodeport_allocator_allocation_total"
	// AllocatorAllocationErrorsTotal counts refused requests by scope.
	AllocatorAllocationErrorsTotal = "nftproxy_nodeport_allocator_allocation_errors_total"
)

// AllocatorMetrics exports an allocator's numbers to Prometheus. It implements allocator.Observer,
// so the allocator stays free of the Prometheus dependency: pass it with allocator.WithObserver.
// One AllocatorMetrics serves one allocator; the gauges hold that allocator's latest counts.
type AllocatorMetrics struct {
	allocated prometheus.Gauge
	available prometheus.Gauge
	total     *prometheus.CounterVec
	errors    *prometheus.CounterVec
}

var _ allocator.Observer = (*AllocatorMetrics)(nil)

// NewAllocatorMetrics creates the allocator collectors and registers them on reg, which the caller
// owns (the daemon's registry, or a fresh one in tests), so nothing here touches a global
// registry. Both scope label values are created up front, so a dashboard sees 0 rather than no
// series before the first request. It fails, registering nothing, if any of the names is already registered on reg.
func NewAllocatorMetrics(reg prometheus.Registerer) (*AllocatorMetrics, error) {
	m := &AllocatorMetrics{
		allocated: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: allocatorNamespace, Subsystem: allocatorSubsystem, Name: "allocated_ports",
			Help: "Node ports currently allocated, counting every port of a range block.",
		}),
		available: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: allocatorNamespace, Subsystem: allocatorSubsystem, Name: "available_ports",
			Help: "Node ports still free in the configured range.",
		}),
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: allocatorNamespace, Subsystem: allocatorSubsystem, Name: "allocation_total",
			Help: "Successful node-port requests; scope is static (user-chosen) or dynamic (allocator-picked). A block counts once.",
		}, []string{"scope"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: allocatorNamespace, Subsystem: allocatorSubsystem, Name: "allocation_errors_total",
			Help: "Refused node-port requests (taken, out of range, range full, invalid width); scope is static or dynamic.",
		}, []string{"scope"}),
	}
	for _, s := range []allocator.Scope{allocator.ScopeStatic, allocator.ScopeDynamic} {
		m.total.WithLabelValues(string(s))
		m.errors.WithLabelValues(string(s))
	}
	cs := []prometheus.Collector{m.allocated, m.available, m.total, m.errors}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] { // leave reg as it was
				reg.Unregister(done)
			}
			return nil, fmt.Errorf("register node-port allocator metrics: %w (create them once per registry)", err)
		}
	}
	return m, nil
}

// Counts sets the allocated and available gauges.
func (m *AllocatorMetrics) Counts(allocated, available int) {
	m.allocated.Set(float64(allocated))
	m.available.Set(float64(available))
}

// Allocated counts one successful request.
func (m *AllocatorMetrics) Allocated(scope allocator.Scope) {
	m.total.WithLabelValues(string(scope)).Inc()
}

// AllocationFailed counts one refused request.
func (m *AllocatorMetrics) AllocationFailed(scope allocator.Scope) {
	m.errors.WithLabelValues(string(scope)).Inc()
}
