package k8s

import (
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func TestReachabilityRemembersTheFirstFailure(t *testing.T) {
	var r reachability
	t0 := time.Unix(1_800_000_000, 0)
	boom := errors.New("connection refused")
	steps := []struct {
		at   time.Duration
		err  error
		want time.Duration // -1: zero (answering)
	}{
		{0, nil, -1},
		{5 * time.Second, boom, 5 * time.Second},
		{10 * time.Second, boom, 5 * time.Second}, // still since the first failure
		{15 * time.Second, nil, -1},
		{20 * time.Second, boom, 20 * time.Second},
	}
	for i, s := range steps {
		r.report(t0.Add(s.at), s.err, logr.Discard())
		got := r.since()
		if s.want < 0 {
			if !got.IsZero() {
				t.Errorf("step %d: failing since %v, want answering", i, got)
			}
			continue
		}
		if want := t0.Add(s.want); !got.Equal(want) {
			t.Errorf("step %d: failing since %v, want %v", i, got, want)
		}
	}
}
