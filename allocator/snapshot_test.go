package allocator

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestSnapshotJSONRoundTrip(t *testing.T) {
	a := newTestAllocator(t, defaultRange, 3)
	mustPort(t, a, 30005, "default/dns")
	mustBlock(t, a, 31000, 100, "voip/rtp")
	mustBlock(t, a, 32000, 10, "voip/sip")
	if _, err := a.Allocate("default/web"); err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	snap := a.Snapshot()
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	if !strings.Contains(string(data), `{"block":"31000-31099","owner":"voip/rtp"}`) {
		t.Errorf("JSON = %s; want blocks written as \"first-last\"", data)
	}
	var back Snapshot
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatalf("Unmarshal(%s): %v", data, err)
	}
	rec := newRecorder()
	b := newTestAllocator(t, defaultRange, 99, WithObserver(rec))
	if err := b.Restore(back); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if got := b.Snapshot(); !reflect.DeepEqual(got, snap) {
		t.Errorf("snapshot after restore = %+v; want %+v", got, snap)
	}
	if b.Used() != a.Used() || rec.allocated != a.Used() || rec.available != a.Free() {
		t.Errorf("restored Used %d, observer %d/%d; want %d/%d", b.Used(), rec.allocated, rec.available, a.Used(), a.Free())
	}
	if len(rec.ok) != 0 {
		t.Errorf("Restore reported allocations %v; want none (restore is not allocation)", rec.ok)
	}
	// The restored allocator behaves as the original: the restored ports are taken.
	var ae *AllocatedError
	if err := b.AllocatePort(31050, "x/y"); !errors.As(err, &ae) || ae.Owner != "voip/rtp" {
		t.Errorf("AllocatePort(31050) on restored = %v; want AllocatedError owned by voip/rtp", err)
	}
}

func TestRestore(t *testing.T) {
	tests := []struct {
		name     string
		snap     Snapshot
		want     error
		wantMsgs []string
	}{
		{
			name: "clean",
			snap: Snapshot{Ports: []PortClaim{{30001, "a/one"}}, Blocks: []BlockClaim{{Range{30010, 30019}, "a/two"}}},
		},
		{
			name: "range field differs but claims fit",
			snap: Snapshot{Range: Range{30000, 40000}, Ports: []PortClaim{{32000, "a/one"}}},
		},
		{
			name:     "two ports",
			snap:     Snapshot{Ports: []PortClaim{{30001, "a/one"}, {30001, "b/two"}}},
			want:     ErrAllocated,
			wantMsgs: []string{"port 30001 is claimed by both a/one (port 30001) and b/two (port 30001)"},
		},
		{
			name:     "port inside block",
			snap:     Snapshot{Ports: []PortClaim{{30015, "a/one"}}, Blocks: []BlockClaim{{Range{30010, 30019}, "b/blk"}}},
			want:     ErrAllocated,
			wantMsgs: []string{"port 30015 is claimed by both a/one (port 30015) and b/blk (block 30010-30019)"},
		},
		{
			name:     "overlapping blocks",
			snap:     Snapshot{Blocks: []BlockClaim{{Range{30010, 30019}, "a/x"}, {Range{30015, 30024}, "b/y"}}},
			want:     ErrAllocated,
			wantMsgs: []string{"port 30015 is claimed by both a/x (block 30010-30019) and b/y (block 30015-30024)"},
		},
		{
			name:     "out of range",
			snap:     Snapshot{Ports: []PortClaim{{80, "a/web"}}, Blocks: []BlockClaim{{Range{32760, 32800}, "a/blk"}}},
			want:     ErrOutOfRange,
			wantMsgs: []string{"port 80 of a/web", "block 32760-32800 of a/blk"},
		},
		{
			name:     "empty owner",
			snap:     Snapshot{Ports: []PortClaim{{30001, ""}}},
			want:     ErrInvalidOwner,
			wantMsgs: []string{"port 30001: invalid owner"},
		},
		{
			name:     "reversed block",
			snap:     Snapshot{Blocks: []BlockClaim{{Range{30020, 30010}, "a/rev"}}},
			want:     ErrInvalidWidth,
			wantMsgs: []string{"block 30020-30010 of a/rev", "ends before it starts"},
		},
		{
			name: "every problem reported at once",
			snap: Snapshot{Ports: []PortClaim{{80, "a/web"}, {30001, "a/one"}, {30001, "b/two"}}},
			want: ErrOutOfRange,
			wantMsgs: []string{"restore 3 ports and 0 blocks", "port 80 of a/web",
				"port 30001 is claimed by both a/one"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newTestAllocator(t, defaultRange, 1)
			mustPort(t, a, 31111, "old/state")
			before := a.Snapshot()
			err := a.Restore(tt.snap)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Restore: %v", err)
				}
				got := a.Snapshot()
				if !reflect.DeepEqual(got.Ports, tt.snap.Ports) || !reflect.DeepEqual(got.Blocks, tt.snap.Blocks) {
					t.Errorf("after Restore snapshot = %+v; want claims of %+v", got, tt.snap)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Restore error = %v; want one wrapping %v", err, tt.want)
			}
			for _, m := range tt.wantMsgs {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Restore error = %q; want it to contain %q", err, m)
				}
			}
			if got := a.Snapshot(); !reflect.DeepEqual(got, before) {
				t.Errorf("failed Restore changed state to %+v; want it unchanged %+v", got, before)
			}
		})
	}
}

func TestConflictErrorFields(t *testing.T) {
	a := newTestAllocator(t, defaultRange, 1)
	err := a.Restore(Snapshot{Ports: []PortClaim{{30001, "a/one"}, {30001, "b/two"}}})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("Restore error = %v; want a *ConflictError inside", err)
	}
	if ce.Port != 30001 || ce.Owner != "a/one" || ce.Other != "b/two" {
		t.Errorf("ConflictError = %+v; want port 30001 between a/one and b/two", ce)
	}
}
