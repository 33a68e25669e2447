package soak

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nftproxy/nftproxy/test/tier"
)

// sample is one scrape of /metrics: every series ("name{labels}" as exposed) and its value.
type sample map[string]float64

// scrape fetches the daemon's /metrics from inside the node.
func (e *env) scrape(d *daemon) (sample, error) {
	r, err := tier.Get(e.ctx, e.lab.Node, "http://"+d.metrics+"/metrics")
	if err != nil {
		return nil, err
	}
	if r.Code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics of %s: %s", d.name, r.Status)
	}
	return parseMetrics(r.Body)
}

// parseMetrics reads the Prometheus text format: comments skipped, "series value" lines kept.
func parseMetrics(body string) (sample, error) {
	m := sample{}
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

// value is a series' value, 0 when absent.
func (m sample) value(series string) float64 { return m[series] }

// sum adds every series of metric name (all label sets).
func (m sample) sum(name string) float64 {
	var s float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			s += v
		}
	}
	return s
}

// delta is after minus before for one series.
func delta(before, after sample, series string) float64 { return after[series] - before[series] }

// quantile estimates quantile q of histogram name from the bucket increments between two
// scrapes, interpolating linearly inside a bucket as Prometheus' histogram_quantile does. It
// returns NaN when nothing was observed in between. name may carry labels, as
// `kube_histogram{ip_family="IPv4"}`, to pick one series of a labelled histogram.
func quantile(before, after sample, name string, q float64) float64 {
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
		leS := strings.TrimSuffix(strings.TrimPrefix(k, prefix), `"}`)
		le, err := strconv.ParseFloat(leS, 64)
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

// seconds formats a quantile in seconds as a duration ("n/a" for NaN).
func seconds(s float64) string {
	if math.IsNaN(s) {
		return "n/a"
	}
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond).String()
}
