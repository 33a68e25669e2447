package model

// ChangeCounts are the Service and EndpointSlice events a Tracker has received, counted as
// kube-proxy's change trackers count them, so that its kubeproxy_sync_proxy_rules_service_changes_*
// and _endpoint_changes_* metrics (and the dashboards and alerts built on them) mean the same
// with nftproxy.
type ChangeCounts struct {
	// ServiceEvents counts every Service added, updated or deleted, an update that changes
	// nothing included (kube-proxy counts each informer event).
	ServiceEvents uint64
	// EndpointSliceEvents counts every EndpointSlice of a Service (one with the
	// kubernetes.io/service-name label) of address type IPv4 or IPv6 added, updated or deleted.
	EndpointSliceEvents uint64
	// PendingServices is how many Services have a Service change the sync loop has not taken
	// yet (TakeChanges).
	PendingServices int
	// PendingEndpointSliceChanges is how many EndpointSlice events changed a slice since the
	// sync loop last took the changes.
	PendingEndpointSliceChanges int
}

// changeCounter is the Tracker's ChangeCounts; it is guarded by Tracker.mu.
type changeCounter struct {
	services, slices uint64
	pendingServices  map[ServiceKey]bool
	pendingSlices    int
}

// countService records a Service event for key; changed says whether the Service differs from
// the one held (a change the sync loop will take).
func (c *changeCounter) countService(key ServiceKey, changed bool) {
	c.services++
	if !changed {
		return
	}
	if c.pendingServices == nil {
		c.pendingServices = map[ServiceKey]bool{}
	}
	c.pendingServices[key] = true
}

// countSlice records an EndpointSlice event; changed says whether the slice differs from the
// one held.
func (c *changeCounter) countSlice(changed bool) {
	c.slices++
	if changed {
		c.pendingSlices++
	}
}

// taken clears the pending counts: the sync loop has taken the changes.
func (c *changeCounter) taken() {
	c.pendingServices = nil
	c.pendingSlices = 0
}

// ChangeCounts returns the Service and EndpointSlice events received so far and those not yet
// taken by the sync loop.
func (t *Tracker) ChangeCounts() ChangeCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	return ChangeCounts{
		ServiceEvents: t.counts.services, EndpointSliceEvents: t.counts.slices,
		PendingServices: len(t.counts.pendingServices), PendingEndpointSliceChanges: t.counts.pendingSlices,
	}
}
