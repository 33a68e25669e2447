package metrics

import "github.com/prometheus/client_golang/prometheus"

// AllocatorLeader is the gauge of `nftproxy allocator`: 1 while this replica holds the Lease
// and assigns node-port blocks, else 0. Summed over the replicas it must be 1; 0 means nobody
// assigns blocks, 2 a split the Lease should make impossible.
const AllocatorLeader = "nftproxy_allocator_leader"

// WatchLeader registers AllocatorLeader on reg, read from isLeader at each scrape.
func WatchLeader(reg prometheus.Registerer, isLeader func() bool) error {
	return reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: AllocatorLeader,
		Help: "1 while this nftproxy allocator replica holds the leader Lease and assigns node-port blocks, else 0."},
		func() float64 {
			if isLeader() {
				return 1
			}
			return 0
		}))
}
