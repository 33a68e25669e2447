package k8s

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// churnProfile sizes the Kubernetes-mode churn. The short one runs in `go test ./...` (CI, no
// time assertions); the long one (NFTPROXY_SOAK=1, as test/soak) is the soak figure.
type churnProfile struct {
	name string
	// services are the Services (each with one EndpointSlice) written before the churn.
	services int
	// rate is the EndpointSlice updates per second the writers aim at (NFTPROXY_K8S_CHURN_RATE
	// overrides it); a rate above what the API server sustains measures the API server.
	rate int
	// clients are the concurrent writers, each with its own Services
	// (NFTPROXY_K8S_CHURN_CLIENTS overrides it).
	clients int
	// churnFor is how long the updates go on.
	churnFor time.Duration
}

var (
	churnShort = churnProfile{name: "short", services: 500, rate: 500, clients: 8, churnFor: 5 * time.Second}
	// The long profile's rate is about what the local API server sustained on the 2-core
	// development VM (5 s runs at 500 Services: 571/s with 4 clients, 887/s with 8, 1663/s
	// with 16, no more with 32 or 64); the figure reports what a run achieved.
	churnLong = churnProfile{name: "long", services: 10000, rate: 1500, clients: 16, churnFor: 60 * time.Second}
)

// churnRun is the profile of this run.
func churnRun() churnProfile {
	p := churnShort
	if os.Getenv("NFTPROXY_SOAK") != "" {
		p = churnLong
	}
	for env, field := range map[string]*int{"NFTPROXY_K8S_CHURN_RATE": &p.rate, "NFTPROXY_K8S_CHURN_CLIENTS": &p.clients} {
		if n, err := strconv.Atoi(os.Getenv(env)); err == nil && n > 0 {
			*field = n
		}
	}
	return p
}

// figures is a scenario's table of what it measured, printed as test/soak prints its own
// (scenario, figure, value), so both modes' figures read side by side.
type figures struct {
	mu       sync.Mutex
	scenario string
	profile  string
	rows     [][2]string
}

// add records one figure and logs it to t.
func (f *figures) add(t *testing.T, name, format string, args ...any) {
	t.Helper()
	v := fmt.Sprintf(format, args...)
	t.Logf("figure %s | %s | %s", f.scenario, name, v)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows = append(f.rows, [2]string{name, v})
}

// print writes the table to w.
func (f *figures) print(w io.Writer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ws, wn := max(len("scenario"), len(f.scenario)), len("figure")
	for _, r := range f.rows {
		wn = max(wn, len(r[0]))
	}
	fmt.Fprintf(w, "\nnftproxy soak (%s profile)\n", f.profile)
	line := func(a, b, c string) { fmt.Fprintf(w, "%-*s  %-*s  %s\n", ws, a, wn, b, c) }
	line("scenario", "figure", "value")
	line(strings.Repeat("-", ws), strings.Repeat("-", wn), "-----")
	for i, r := range f.rows {
		s := f.scenario
		if i > 0 {
			s = ""
		}
		line(s, r[0], r[1])
	}
}

// sample is one scrape of /metrics: every series ("name{labels}" as exposed) and its value.
type sample map[string]float64

// scrape fetches the daemon's /metrics (the deploy/ address) from inside the node.
func (e *env) scrape() (sample, error) {
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.metricsAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.lab.Node.HTTPClient(10 * time.Second).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m := sample{}
	sc := bufio.NewScanner(resp.Body)
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

// delta is after minus before for one series.
func delta(before, after sample, series string) float64 { return after[series] - before[series] }

// quantile estimates quantile q of histogram name from the bucket increments between two
// scrapes, interpolating inside a bucket as Prometheus' histogram_quantile does; NaN when
// nothing was observed in between.
func quantile(before, after sample, name string, q float64) float64 {
	type bucket struct{ le, n float64 }
	var bs []bucket
	prefix := name + `_bucket{le="`
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
				return lower
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

// seconds formats a quantile in seconds ("n/a" for NaN).
func seconds(s float64) string {
	if math.IsNaN(s) {
		return "n/a"
	}
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
}

// peakRSS is the VmHWM of the process running exe (the daemon: setpriv execs it), read from
// /proc while it runs.
func peakRSS(exe string) string {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if target, err := os.Readlink(d + "/exe"); err != nil || target != exe {
			continue
		}
		b, err := os.ReadFile(d + "/status")
		if err != nil {
			return "unknown (" + err.Error() + ")"
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return "unknown (no process runs " + exe + ")"
}
