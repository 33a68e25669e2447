package syncs

import (
	"encoding/json"
	"reflect"
	"testing"
)

func TestParseShapes(t *testing.T) {
	got, err := ParseShapes("1000, 10000,5000x50", 10)
	if err != nil {
		t.Fatal(err)
	}
	want := []Shape{{1000, 10}, {10000, 10}, {5000, 50}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"x50", "5000x", "5000x0", "0", "5k"} {
		if _, err := ParseShapes(bad, 10); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestResultsJSON: results.json keys are "5000x50"; files written before shapes existed have
// bare numbers of Services, which are 10 endpoints each (-rerender reads them).
func TestResultsJSON(t *testing.T) {
	res := Results{{5000, 50}: {Full: {{Ops: 1}}}, {1000, 10}: {Full: {{Ops: 2}}}}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	var back Results
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, res) {
		t.Errorf("round trip: got %v, want %v", back, res)
	}
	var old Results
	if err := json.Unmarshal([]byte(`{"1000": {"full sync from empty": [{"Ops": 3}]}}`), &old); err != nil {
		t.Fatal(err)
	}
	if got := old[Shape{1000, 10}][Full]; len(got) != 1 || got[0].Ops != 3 {
		t.Errorf("old results.json: got %v", old)
	}
}

func TestAllShapes(t *testing.T) {
	c := Config{Sizes: []int{1000, 50000}, Endpoints: 10, Shapes: []Shape{{5000, 50}, {1000, 10}}, Runs: 5, RunsAt: map[int]int{50000: 1}, ShapeRuns: 3}
	want := []Shape{{1000, 10}, {50000, 10}, {5000, 50}}
	if got := c.AllShapes(); !reflect.DeepEqual(got, want) {
		t.Errorf("AllShapes: got %v, want %v", got, want)
	}
	for s, n := range map[Shape]int{{1000, 10}: 5, {50000, 10}: 1, {5000, 50}: 3} {
		if got := c.runs(s); got != n {
			t.Errorf("runs(%v) = %d, want %d", s, got, n)
		}
	}
	if got := (Results{{5000, 50}: nil, {50000, 10}: nil, {1000, 10}: nil}).Shapes(); !reflect.DeepEqual(got, want) {
		t.Errorf("Results.Shapes: got %v, want %v", got, want)
	}
}
