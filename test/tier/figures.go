package tier

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Figures is a run's table of what its scenarios measured (scenario, figure, value), in the
// order reported: the soak and the Kubernetes-mode churn print the same table, so both modes'
// figures read side by side. Safe for concurrent use.
type Figures struct {
	mu   sync.Mutex
	rows []figure
}

type figure struct{ scenario, name, value string }

// Add records one figure of scenario and logs it to t.
func (f *Figures) Add(t *testing.T, scenario, name string, format string, args ...any) {
	t.Helper()
	v := fmt.Sprintf(format, args...)
	t.Logf("figure %s | %s | %s", scenario, name, v)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows = append(f.rows, figure{scenario, name, v})
}

// Print writes the table under the title "nftproxy soak (PROFILE profile)"; nothing when no
// figure was added.
func (f *Figures) Print(w io.Writer, profile string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.rows) == 0 {
		return
	}
	ws, wn := len("scenario"), len("figure")
	for _, r := range f.rows {
		ws, wn = max(ws, len(r.scenario)), max(wn, len(r.name))
	}
	fmt.Fprintf(w, "\nnftproxy soak (%s profile)\n", profile)
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

// Sample is one scrape of /metrics: every series ("name{labels}" as exposed) and its value.
type Sample map[string]float64

// ParseMetrics reads the Prometheus text format: comments skipped, "series value" lines kept.
func ParseMetrics(body string) (Sample, error) {
	m := Sample{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics line %q: no value", l)
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", l, err)
		}
		m[l[:i]] = v
	}
	return m, sc.Err()
}

// Delta is after minus before for one series.
func Delta(before, after Sample, series string) float64 { return after[series] - before[series] }

// Quantile estimates quantile q of histogram name from the bucket increments between two
// scrapes, interpolating linearly inside a bucket as Prometheus' histogram_quantile does. It
// returns NaN when nothing was observed in between. name may carry labels, as
// `kube_histogram{ip_family="IPv4"}`, to pick one series of a labelled histogram.
func Quantile(before, after Sample, name string, q float64) float64 {
	type bucket struct{ le, n float64 }
	var bs []bucket
	prefix := name + `_bucket{le="`
	if i := strings.IndexByte(name, '{'); i >= 0 {
		prefix = name[:i] + `_bucket{` + strings.TrimSuffix(name[i+1:], "}") + `,le="`
	}
	for k, v := range after {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		le, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimPrefix(k, prefix), `"}`), 64)
		if err != nil {
			continue
		}
		bs = append(bs, bucket{le, v - before[k]})
	}
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return math.NaN()
	}
	rank := q * bs[len(bs)-1].n
	lower, prevN := 0.0, 0.0
	for _, b := range bs {
		if b.n >= rank {
			if math.IsInf(b.le, 1) {
				return lower // above the last finite bucket: report its bound
			}
			if b.n == prevN {
				return b.le
			}
			return lower + (b.le-lower)*(rank-prevN)/(b.n-prevN)
		}
		lower, prevN = b.le, b.n
	}
	return lower
}

// Seconds formats a quantile in seconds as a duration ("n/a" for NaN).
func Seconds(s float64) string {
	if math.IsNaN(s) {
		return "n/a"
	}
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
}

// AddCanary records when a canary's change, written at wrote, was first answered by its new pod
// (seen; answered false when it never was), and whether that was during a churn that ended at
// churnEnd or after it.
func (f *Figures) AddCanary(t *testing.T, scenario string, wrote, seen, churnEnd time.Time, answered bool) {
	t.Helper()
	if !answered {
		f.Add(t, scenario, "canary change written mid-churn", "never answered by its new pod")
		return
	}
	during := "during the churn"
	if seen.After(churnEnd) {
		during = fmt.Sprintf("%v after the churn stopped", seen.Sub(churnEnd).Round(time.Millisecond))
	}
	f.Add(t, scenario, "canary change written mid-churn", "answered by its new pod %v after the write (%s)",
		seen.Sub(wrote).Round(time.Millisecond), during)
}

// PeakRSS is the peak resident set (VmHWM) of process pid, read from /proc while it runs.
func PeakRSS(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
