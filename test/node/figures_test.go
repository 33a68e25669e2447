package node

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// figures collects what the tier measures, printed at the end: durations and, per day-2
// phase, connections attempted and failed by kind.
type figures struct {
	mu        sync.Mutex
	order     []string
	durations map[string]time.Duration
	phases    []string
	counts    map[string]map[string]*count // phase -> kind -> count
}

type count struct{ attempted, failed int }

func newFigures() *figures {
	return &figures{durations: map[string]time.Duration{}, counts: map[string]map[string]*count{}}
}

func (f *figures) set(name string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.durations[name]; !ok {
		f.order = append(f.order, name)
	}
	f.durations[name] = d
}

// add counts one connection of kind in phase.
func (f *figures) add(phase, kind string, failed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.counts[phase]
	if !ok {
		m = map[string]*count{}
		f.counts[phase] = m
		f.phases = append(f.phases, phase)
	}
	c, ok := m[kind]
	if !ok {
		c = &count{}
		m[kind] = c
	}
	c.attempted++
	if failed {
		c.failed++
	}
}

// failed is the number of failed connections in phase, all kinds.
func (f *figures) failed(phase string) (failed, attempted int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.counts[phase] {
		failed += c.failed
		attempted += c.attempted
	}
	return failed, attempted
}

func (f *figures) print(t *testing.T) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	b.WriteString("\nnode tier figures\n")
	for _, n := range f.order {
		fmt.Fprintf(&b, "  %-48s %10s\n", n, f.durations[n].Round(time.Millisecond))
	}
	if len(f.phases) > 0 {
		fmt.Fprintf(&b, "  %-28s %-26s %9s %7s\n", "phase", "connections", "attempted", "failed")
		for _, p := range f.phases {
			kinds := make([]string, 0, len(f.counts[p]))
			for k := range f.counts[p] {
				kinds = append(kinds, k)
			}
			sort.Strings(kinds)
			for _, k := range kinds {
				c := f.counts[p][k]
				fmt.Fprintf(&b, "  %-28s %-26s %9d %7d\n", p, k, c.attempted, c.failed)
			}
		}
	}
	t.Log(b.String())
}
