package allocator

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

// Address plan for every test in this package: the default node-port range, whose static band is
// 30000-30085 and dynamic band 30086-32767, unless a test needs a small range to exhaust.
const defaultRange = "30000-32767"

// recorder is an Observer that remembers what it was told.
type recorder struct {
	allocated, available int
	ok, failed           map[Scope]int
}

func newRecorder() *recorder { return &recorder{ok: map[Scope]int{}, failed: map[Scope]int{}} }

func (r *recorder) Counts(allocated, available int) { r.allocated, r.available = allocated, available }
func (r *recorder) Allocated(s Scope)               { r.ok[s]++ }
func (r *recorder) AllocationFailed(s Scope)        { r.failed[s]++ }

func newTestAllocator(t *testing.T, r string, seed uint64, opts ...Option) *Allocator {
	t.Helper()
	opts = append([]Option{WithRand(rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)))}, opts...)
	a, err := New(MustParseRange(r), opts...)
	if err != nil {
		t.Fatalf("New(%s): %v", r, err)
	}
	return a
}

// mustPort and mustBlock set up state a test depends on.
func mustPort(t *testing.T, a *Allocator, p int, owner string) {
	t.Helper()
	if err := a.AllocatePort(p, owner); err != nil {
		t.Fatalf("setup AllocatePort(%d, %s): %v", p, owner, err)
	}
}

func mustBlock(t *testing.T, a *Allocator, start, width int, owner string) {
	t.Helper()
	if _, err := a.AllocateBlockAt(start, width, owner); err != nil {
		t.Fatalf("setup AllocateBlockAt(%d, %d, %s): %v", start, width, owner, err)
	}
}

// checkErr compares an error against the sentinel and message fragment a test expects.
func checkErr(t *testing.T, what string, err, want error, wantMsg string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("%s: unexpected error %v", what, err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: error = %v; want one wrapping %v", what, err, want)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("%s: error = %q; want it to contain %q", what, err, wantMsg)
	}
}

func TestNewRejectsInvalidRange(t *testing.T) {
	tests := []struct {
		name string
		r    Range
	}{
		{name: "zero value", r: Range{}},
		{name: "reversed", r: Range{First: 200, Last: 100}},
		{name: "past 65535", r: Range{First: 65000, Last: 70000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(tt.r)
			if !errors.Is(err, ErrInvalidRange) {
				t.Fatalf("New(%v) = %v, %v; want ErrInvalidRange", tt.r, a, err)
			}
		})
	}
}

func TestAllocatePort(t *testing.T) {
	tests := []struct {
		name    string
		port    int
		owner   string
		want    error
		wantMsg string
	}{
		{name: "static band", port: 30000, owner: "ns/s"},
		{name: "static band end", port: 30085, owner: "ns/s"},
		{name: "dynamic band", port: 31000, owner: "ns/s"},
		{name: "range end", port: 32767, owner: "ns/s"},
		{name: "below range", port: 29999, owner: "ns/s", want: ErrOutOfRange, wantMsg: "port 29999 is outside the allocator's range 30000-32767"},
		{name: "above range", port: 32768, owner: "ns/s", want: ErrOutOfRange, wantMsg: "port 32768 is outside"},
		{name: "held single port", port: 30100, owner: "ns/s", want: ErrAllocated, wantMsg: "port 30100 is already allocated to ns/a"},
		{name: "held by own owner", port: 30100, owner: "ns/a", want: ErrAllocated, wantMsg: "allocated to ns/a"},
		{name: "inside a block", port: 30205, owner: "ns/s", want: ErrAllocated, wantMsg: "port 30205 is already allocated to ns/b (block 30200-30209)"},
		{name: "empty owner", port: 31000, owner: "", want: ErrInvalidOwner, wantMsg: "owner is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			a := newTestAllocator(t, defaultRange, 1, WithObserver(rec))
			mustPort(t, a, 30100, "ns/a")
			mustBlock(t, a, 30200, 10, "ns/b")
			before := a.Used()
			err := a.AllocatePort(tt.port, tt.owner)
			checkErr(t, "AllocatePort", err, tt.want, tt.wantMsg)
			wantUsed := before
			if tt.want == nil {
				wantUsed++
				if o, _, ok := a.Owner(tt.port); !ok || o != tt.owner {
					t.Errorf("Owner(%d) = %q, %v; want %q, true", tt.port, o, ok, tt.owner)
				}
			}
			if got := a.Used(); got != wantUsed {
				t.Errorf("Used() = %d; want %d", got, wantUsed)
			}
			if rec.allocated != wantUsed || rec.available != a.Range().Size()-wantUsed {
				t.Errorf("observer counts = %d/%d; want %d/%d", rec.allocated, rec.available, wantUsed, a.Range().Size()-wantUsed)
			}
			wantFailed := 0
			if tt.want != nil {
				wantFailed = 1
			}
			if rec.failed[ScopeStatic] != wantFailed || rec.failed[ScopeDynamic] != 0 {
				t.Errorf("failures = %v; want static=%d", rec.failed, wantFailed)
			}
		})
	}
}

func TestAllocatedErrorFields(t *testing.T) {
	a := newTestAllocator(t, defaultRange, 1)
	mustBlock(t, a, 30200, 10, "ns/b")
	err := a.AllocatePort(30201, "ns/c")
	var ae *AllocatedError
	if !errors.As(err, &ae) {
		t.Fatalf("AllocatePort error = %v; want *AllocatedError", err)
	}
	want := Range{30200, 30209}
	if ae.Port != 30201 || ae.Owner != "ns/b" || ae.Block == nil || *ae.Block != want {
		t.Errorf("AllocatedError = %+v; want port 30201 owner ns/b block %v", ae, want)
	}
}

// TestAllocateBandOrder exhausts a small range dynamically: the dynamic band fills first, then the
// static band, then ErrFull, and every port is handed out once.
func TestAllocateBandOrder(t *testing.T) {
	tests := []struct {
		name       string
		r          string
		preStatic  []int // static claims made before the dynamic ones
		wantInBand int   // dynamic allocations that must land in the dynamic band
	}{
		{name: "KEP small range", r: "32567-32767", wantInBand: 185},
		{name: "static claims do not change the order", r: "32567-32767", preStatic: []int{32567, 32600, 32767}, wantInBand: 183},
		{name: "no bands", r: "30000-30015", wantInBand: 16},
		{name: "17 ports, one dynamic", r: "30000-30016", wantInBand: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestAllocator(t, tt.r, 7)
			for _, p := range tt.preStatic {
				mustPort(t, a, p, "ns/static")
			}
			dyn := a.Range().DynamicBand()
			seen := map[int]bool{}
			for i := 0; ; i++ {
				p, err := a.Allocate("ns/dyn")
				if err != nil {
					if !errors.Is(err, ErrFull) {
						t.Fatalf("Allocate #%d error = %v; want ErrFull", i, err)
					}
					if want := a.Range().Size() - len(tt.preStatic); i != want {
						t.Errorf("%d allocations before full; want %d", i, want)
					}
					break
				}
				if seen[p] {
					t.Fatalf("Allocate #%d returned %d twice", i, p)
				}
				seen[p] = true
				if inDyn := dyn.Contains(p); inDyn != (i < tt.wantInBand) {
					t.Fatalf("Allocate #%d = %d, in dynamic band %s: %v; want %v", i, p, dyn, inDyn, i < tt.wantInBand)
				}
			}
		})
	}
}

func TestAllocateIsReproducible(t *testing.T) {
	seq := func(seed uint64) []int {
		a := newTestAllocator(t, defaultRange, seed)
		var out []int
		for range 20 {
			p, err := a.Allocate("ns/x")
			if err != nil {
				t.Fatalf("Allocate: %v", err)
			}
			out = append(out, p)
		}
		return out
	}
	a, b, c := seq(42), seq(42), seq(43)
	if !equalInts(a, b) {
		t.Errorf("same seed gave %v and %v; want equal", a, b)
	}
	if equalInts(a, c) {
		t.Errorf("seeds 42 and 43 both gave %v; want the random start to differ", a)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestRelease(t *testing.T) {
	tests := []struct {
		name    string
		port    int
		want    error
		wantMsg string
	}{
		{name: "held port", port: 30100},
		{name: "free port", port: 30101, want: ErrNotAllocated, wantMsg: "release port 30101: not allocated: the port is free"},
		{name: "port of a block", port: 30203, want: ErrNotAllocated, wantMsg: "part of block 30200-30209 of ns/b"},
		{name: "out of range", port: 80, want: ErrOutOfRange, wantMsg: "port 80 is outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			a := newTestAllocator(t, defaultRange, 1, WithObserver(rec))
			mustPort(t, a, 30100, "ns/a")
			mustBlock(t, a, 30200, 10, "ns/b")
			err := a.Release(tt.port)
			checkErr(t, "Release", err, tt.want, tt.wantMsg)
			wantUsed := 11
			if tt.want == nil {
				wantUsed = 10
				if err := a.AllocatePort(tt.port, "ns/new"); err != nil {
					t.Errorf("AllocatePort after Release: %v; want the port free again", err)
				}
				wantUsed++
			}
			if got := a.Used(); got != wantUsed || rec.allocated != wantUsed {
				t.Errorf("Used() = %d, observer says %d; want %d", got, rec.allocated, wantUsed)
			}
		})
	}
}
