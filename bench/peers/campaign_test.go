package peers

import (
	"strings"
	"testing"
	"time"
)

// TestBudget: a wait is bounded by the single-wait limit, the peer's budget and the campaign's
// deadline, whichever ends first, and a spent budget is an error that says so.
func TestBudget(t *testing.T) {
	b := newBudget(Config{Limit: time.Hour, PeerBudget: 2 * time.Hour})
	if l, err := b.wait("x"); err != nil || l != time.Hour {
		t.Errorf("limit first: got %v, %v", l, err)
	}
	b = newBudget(Config{Limit: time.Hour, PeerBudget: time.Minute})
	if l, err := b.wait("x"); err != nil || l > time.Minute || l < 50*time.Second {
		t.Errorf("budget first: got %v, %v", l, err)
	}
	b = newBudget(Config{Limit: time.Hour, PeerBudget: time.Hour, Deadline: time.Now().Add(10 * time.Second)})
	if l, err := b.wait("x"); err != nil || l > 10*time.Second {
		t.Errorf("deadline first: got %v, %v", l, err)
	}
	b = newBudget(Config{Limit: time.Hour, Deadline: time.Now().Add(-time.Second)})
	if _, err := b.wait("restart"); err == nil || !strings.Contains(err.Error(), "restart: not started") {
		t.Errorf("spent: got %v, want an error naming the step", err)
	}
	if l, err := newBudget(Config{Limit: time.Minute}).wait("x"); err != nil || l != time.Minute {
		t.Errorf("no budget: got %v, %v", l, err)
	}
}
