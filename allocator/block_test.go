package allocator

import (
	"errors"
	"testing"
)

func TestAllocateBlock(t *testing.T) {
	tests := []struct {
		name    string
		r       string
		setup   func(t *testing.T, a *Allocator)
		width   int
		want    Range
		wantErr error
		wantMsg string
	}{
		{name: "empty range packs at the top", r: defaultRange, width: 100, want: Range{32668, 32767}},
		{name: "width 1", r: defaultRange, width: 1, want: Range{32767, 32767}},
		{
			name: "below existing blocks",
			r:    defaultRange,
			setup: func(t *testing.T, a *Allocator) {
				mustBlock(t, a, 32668, 100, "ns/a")
				mustPort(t, a, 32660, "ns/p")
			},
			width: 10, want: Range{32650, 32659},
		},
		{
			name: "fits in a hole of exactly the width",
			r:    "32567-32767",
			setup: func(t *testing.T, a *Allocator) {
				mustBlock(t, a, 32600, 168, "ns/top")   // 32600-32767
				mustBlock(t, a, 32583, 10, "ns/low")    // 32583-32592; hole 32593-32599
				mustPort(t, a, 32570, "ns/static-user") // static band
			},
			width: 7, want: Range{32593, 32599},
		},
		{
			name: "dynamic band too fragmented: straddles into static band as little as possible",
			r:    "32567-32767", // static 32567-32582, dynamic 32583-32767
			setup: func(t *testing.T, a *Allocator) {
				mustBlock(t, a, 32590, 178, "ns/top") // leaves 32583-32589 free in the dynamic band
			},
			width: 10, want: Range{32580, 32589},
		},
		{
			name: "dynamic band full: static band",
			r:    "32567-32767",
			setup: func(t *testing.T, a *Allocator) {
				mustBlock(t, a, 32583, 185, "ns/top")
			},
			width: 16, want: Range{32567, 32582},
		},
		{
			name:  "no bands: whole range",
			r:     "30000-30009",
			width: 10, want: Range{30000, 30009},
		},
		{
			name: "no contiguous run",
			r:    "32567-32767",
			setup: func(t *testing.T, a *Allocator) {
				for p := 32567; p <= 32767; p += 20 {
					mustPort(t, a, p, "ns/comb")
				}
			},
			width: 20, wantErr: ErrFull, wantMsg: "no run of 20 contiguous free ports in 32567-32767 (190 ports free in total)",
		},
		{name: "zero width", r: defaultRange, width: 0, wantErr: ErrInvalidWidth, wantMsg: "invalid block width 0: a block must hold between 1 and 2768 ports"},
		{name: "negative width", r: defaultRange, width: -3, wantErr: ErrInvalidWidth, wantMsg: "invalid block width -3"},
		{name: "wider than the range", r: "30000-30009", width: 11, wantErr: ErrInvalidWidth, wantMsg: "between 1 and 10 ports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			a := newTestAllocator(t, tt.r, 1, WithObserver(rec))
			if tt.setup != nil {
				tt.setup(t, a)
			}
			before := a.Used()
			got, err := a.AllocateBlock(tt.width, "ns/blk")
			checkErr(t, "AllocateBlock", err, tt.wantErr, tt.wantMsg)
			if tt.wantErr != nil {
				if rec.failed[ScopeDynamic] != 1 || a.Used() != before {
					t.Errorf("after failure: dynamic failures %d, used %d; want 1, %d", rec.failed[ScopeDynamic], a.Used(), before)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("AllocateBlock(%d) = %v; want %v", tt.width, got, tt.want)
			}
			if a.Used() != before+tt.width {
				t.Errorf("Used() = %d; want %d", a.Used(), before+tt.width)
			}
			for p := got.First; p <= got.Last; p++ {
				if o, b, ok := a.Owner(p); !ok || o != "ns/blk" || b != got {
					t.Fatalf("Owner(%d) = %q, %v, %v; want ns/blk, %v, true", p, o, b, ok, got)
				}
			}
		})
	}
}

func TestAllocateBlockAt(t *testing.T) {
	tests := []struct {
		name    string
		start   int
		width   int
		want    error
		wantMsg string
	}{
		{name: "static band", start: 30000, width: 50},
		{name: "dynamic band", start: 31000, width: 1000},
		{name: "touching neighbours", start: 30101, width: 99}, // 30101-30199: between 30100 and 30200
		{name: "over a single port", start: 30090, width: 20, want: ErrAllocated, wantMsg: "port 30100 is already allocated to ns/a"},
		{name: "over a block edge", start: 30209, width: 5, want: ErrAllocated, wantMsg: "port 30209 is already allocated to ns/b (block 30200-30209)"},
		{name: "runs past the end", start: 32760, width: 10, want: ErrOutOfRange, wantMsg: "block 32760-32769 is outside the allocator's range 30000-32767"},
		{name: "starts below", start: 29995, width: 10, want: ErrOutOfRange, wantMsg: "block 29995-30004 is outside"},
		{name: "zero width", start: 31000, width: 0, want: ErrInvalidWidth, wantMsg: "invalid block width 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder()
			a := newTestAllocator(t, defaultRange, 1, WithObserver(rec))
			mustPort(t, a, 30100, "ns/a")
			mustBlock(t, a, 30200, 10, "ns/b")
			got, err := a.AllocateBlockAt(tt.start, tt.width, "ns/req")
			checkErr(t, "AllocateBlockAt", err, tt.want, tt.wantMsg)
			if tt.want != nil {
				if rec.failed[ScopeStatic] != 1 || a.Used() != 11 {
					t.Errorf("after failure: static failures %d, used %d; want 1, 11", rec.failed[ScopeStatic], a.Used())
				}
				return
			}
			want := Range{tt.start, tt.start + tt.width - 1}
			if got != want {
				t.Errorf("AllocateBlockAt = %v; want %v", got, want)
			}
			if rec.ok[ScopeStatic] != 3 || a.Used() != 11+tt.width {
				t.Errorf("static successes %d, used %d; want 3, %d", rec.ok[ScopeStatic], a.Used(), 11+tt.width)
			}
		})
	}
}

func TestReleaseBlock(t *testing.T) {
	tests := []struct {
		name    string
		block   Range
		want    error
		wantMsg string
	}{
		{name: "exact block", block: Range{30200, 30209}},
		{name: "shorter than the block", block: Range{30200, 30205}, want: ErrNotAllocated, wantMsg: "the block starting there is 30200-30209 (owner ns/b)"},
		{name: "not a block start", block: Range{30201, 30209}, want: ErrNotAllocated, wantMsg: "no block starts at port 30201"},
		{name: "a single port", block: Range{30100, 30100}, want: ErrNotAllocated, wantMsg: "no block starts at port 30100"},
		{name: "out of range", block: Range{40000, 40010}, want: ErrOutOfRange, wantMsg: "block 40000-40010 is outside"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestAllocator(t, defaultRange, 1)
			mustPort(t, a, 30100, "ns/a")
			mustBlock(t, a, 30200, 10, "ns/b")
			err := a.ReleaseBlock(tt.block)
			checkErr(t, "ReleaseBlock", err, tt.want, tt.wantMsg)
			wantUsed, wantBlocks := 11, 1
			if tt.want == nil {
				wantUsed, wantBlocks = 1, 0
			}
			if got := a.Used(); got != wantUsed {
				t.Errorf("Used() = %d; want %d", got, wantUsed)
			}
			if got := len(a.Blocks()); got != wantBlocks {
				t.Errorf("len(Blocks()) = %d; want %d", got, wantBlocks)
			}
		})
	}
}

func TestFullErrorFields(t *testing.T) {
	a := newTestAllocator(t, "30000-30003", 1)
	mustPort(t, a, 30001, "ns/a")
	_, err := a.AllocateBlock(3, "ns/b")
	var fe *FullError
	if !errors.As(err, &fe) {
		t.Fatalf("AllocateBlock error = %v; want *FullError", err)
	}
	want := FullError{Width: 3, Free: 3, Range: Range{30000, 30003}}
	if *fe != want {
		t.Errorf("FullError = %+v; want %+v", *fe, want)
	}
}
