package allocator

import (
	"testing"
)

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
