package soak

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

// figures collects what every scenario measured, in the order reported, for the table TestMain
// prints at the end of the run.
type figures struct {
	mu   sync.Mutex
	rows []figure
}

type figure struct{ scenario, name, value string }

// report is the run's table.
var report figures

// add records one figure of scenario and logs it to t.
func (f *figures) add(t *testing.T, scenario, name string, format string, args ...any) {
	t.Helper()
	v := fmt.Sprintf(format, args...)
	t.Logf("figure %s | %s | %s", scenario, name, v)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows = append(f.rows, figure{scenario, name, v})
}

// print writes the table (nothing when no scenario ran).
func (f *figures) print(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.rows) == 0 {
		return
	}
	ws, wn := len("scenario"), len("figure")
	for _, r := range f.rows {
		ws, wn = max(ws, len(r.scenario)), max(wn, len(r.name))
	}
	fmt.Fprintf(w, "\nnftproxy soak (%s profile)\n", run.name)
	line := func(a, b, c string) { fmt.Fprintf(w, "%-*s  %-*s  %s\n", ws, a, wn, b, c) }
	line("scenario", "figure", "value")
	line(strings.Repeat("-", ws), strings.Repeat("-", wn), "-----")
	prev := ""
	for _, r := range f.rows {
		s := r.scenario
		if s == prev {
			s = ""
		}
		prev = r.scenario
		line(s, r.name, r.value)
	}
}
