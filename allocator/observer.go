package allocator

// Scope says how a port was asked for; KEP-3668 labels its allocation counters with it, because
// the bands only make sense if static requests land low and dynamic ones land high.
type Scope string

// Scopes.
const (
	// ScopeStatic is a request for a port or block the user chose (spec.ports[].nodePort, or a
	// block written into the annotation by hand).
	ScopeStatic Scope = "static"
	// ScopeDynamic is a request where the allocator picks.
	ScopeDynamic Scope = "dynamic"
)

// Observer receives the allocator's numbers. It exists so this package does not import a metrics
// library: the metrics package implements it with Prometheus collectors, tests implement it with
// a recorder. Methods are called while the allocator holds its lock, in the order the changes
// happened, so gauges never go backwards in time; they must be quick and must not call back into
// the allocator.
type Observer interface {
	// Counts reports the number of allocated and free ports after every change.
	Counts(allocated, available int)
	// Allocated reports one successful request (a block counts once, whatever its width).
	Allocated(scope Scope)
	// AllocationFailed reports one refused request, whatever the reason.
	AllocationFailed(scope Scope)
}

// nopObserver is used when the caller passes none, so the allocator never checks for nil.
type nopObserver struct{}

func (nopObserver) Counts(int, int)        {}
func (nopObserver) Allocated(Scope)        {}
func (nopObserver) AllocationFailed(Scope) {}
