package k8s

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// probe dials s from client-1 and checks which pods answer (none: wantPods empty means the
// packet must go unanswered, as a Service nftproxy does not handle).
func (e *env) probe(s fixture.Service, wantPods ...int) {
	e.t.Helper()
	r := e.lab.Client(1).Dial(e.ctx, "tcp", vip(s))
	if len(wantPods) == 0 {
		if r.Outcome == lab.Replied {
			e.t.Errorf("%s (%s): got %v, want no answer", s.Name, vip(s), r)
		}
		return
	}
	var names []string
	for _, n := range wantPods {
		names = append(names, e.lab.Pod(n).Name)
	}
	if r.Outcome != lab.Replied || !slices.Contains(names, r.Reply.Pod) {
		e.t.Errorf("%s (%s): got %v, want a reply from one of %v", s.Name, vip(s), r, names)
	}
}

func TestServicesFromTheAPIAreProgrammed(t *testing.T) {
	e := newEnv(t, nil)
	web := httpService("web", 10, 1)
	theirs := httpService("theirs", 11, 1)
	theirs.Labels = map[string]string{annotation.ServiceProxyNameLabel: "other"}
	e.createService(theirs)
	e.createService(web)
	e.waitProgrammed(web)
	if got := e.healthz(); !strings.Contains(got, " 200 ") {
		t.Errorf("/healthz after the first sync: got %q, want 200", got)
	}

	steps := []struct {
		name string
		pods []int
	}{
		{"first endpoint", []int{1}},
		{"endpoint moves to pod-2", []int{2}},
		{"both pods", []int{1, 2}},
	}
	outer := t
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			e.t = t
			defer func() { e.t = outer }()
			e.setEndpoints(web, st.pods...)
			e.waitFor("endpoints "+e.lab.Pod(st.pods[0]).Name, func(rs string) bool { return hasExactly(rs, st.pods) })
			for range 2 * len(st.pods) {
				e.probe(web, st.pods...)
			}
		})
	}
	// Programmed after theirs was created, so theirs has been seen and skipped.
	if rs := e.ruleset(); strings.Contains(rs, marker(theirs)) {
		t.Errorf("a Service labelled for proxy %q is programmed; ruleset:\n%s", "other", rs)
	}
	e.probe(theirs)
}

// hasExactly reports whether the ruleset DNATs to exactly the given pods' IPv4 addresses.
func hasExactly(rs string, pods []int) bool {
	for n := 1; n <= 2; n++ {
		if strings.Contains(rs, lab.PodIPv4(n).String()) != slices.Contains(pods, n) {
			return false
		}
	}
	return true
}

func TestServiceProxyNameLabel(t *testing.T) {
	e := newEnv(t, map[string]string{"service-proxy-name": "nftproxy"})
	ours := httpService("ours", 20, 1)
	ours.Labels = map[string]string{annotation.ServiceProxyNameLabel: "nftproxy"}
	plain := httpService("plain", 21, 2)
	e.createService(plain)
	e.createService(ours)
	e.waitProgrammed(ours)
	if rs := e.ruleset(); strings.Contains(rs, marker(plain)) {
		t.Errorf("with --service-proxy-name=nftproxy an unlabelled Service is programmed; ruleset:\n%s", rs)
	}
	e.probe(ours, 1)
	e.probe(plain)
}

func TestBadAnnotationMakesOneEvent(t *testing.T) {
	e := newEnv(t, nil)
	bad := httpService("rtp", 30, 1)
	bad.Annotations = map[string]string{annotation.PortRangesKey: "http=80-70"}
	good := httpService("ok", 31, 1)
	e.createService(bad)
	e.createService(good)
	e.waitProgrammed(good) // a bad Service does not hold the others back

	reason, note := e.waitEvent(bad.Name)
	if reason != model.ReasonRangeEndBeforeStart || !strings.Contains(note, "80-70") {
		t.Errorf("event: got reason %q note %q, want Warning %s naming 80-70", reason, note, model.ReasonRangeEndBeforeStart)
	}
	if rs := e.ruleset(); strings.Contains(rs, marker(bad)) {
		t.Errorf("rejected Service is programmed; ruleset:\n%s", rs)
	}

	// Endpoint churn on the rejected Service re-syncs but must not repeat the Event: after the
	// daemon has programmed a later change (so it has seen the churn), still one Event.
	for _, pods := range [][]int{{2}, {1, 2}, {1}} {
		e.setEndpoints(bad, pods...)
	}
	e.setEndpoints(good, 2)
	e.waitFor("ok moved to pod-2", func(rs string) bool { return hasExactly(rs, []int{2}) })
	var names []string
	for _, ev := range e.eventsOn(bad.Name) {
		names = append(names, ev.Name)
	}
	if len(names) != 1 {
		t.Errorf("events on %s after endpoint churn: got %d (%v), want 1", bad.Name, len(names), names)
	}
}

// TestNetworkProgrammingIsObserved: every change written through the API and programmed is
// observed in the network-programming histograms, nftproxy's and the kube-proxy compatible one
// dashboards read: a new Service with its EndpointSlice, then an endpoint change. How long it
// takes is a measurement, not an assertion: bench/report's TestPacing gives the figures
// (bench/README.md, "Sync pacing"; `-pacing-sizes 100` for a quiet cluster).
func TestNetworkProgrammingIsObserved(t *testing.T) {
	e := newEnv(t, nil)
	series := []string{"nftproxy_network_programming_duration_seconds_count", `kubeproxy_network_programming_duration_seconds_count{ip_family="IPv4"}`}
	// counts reads both series' observation counts; an error until /metrics serves.
	counts := func() ([]float64, error) {
		r, err := tier.Get(e.ctx, e.lab.Node, "http://"+e.metricsAddr+"/metrics")
		if err != nil {
			return nil, err
		}
		body := r.Body
		var out []float64
		for _, s := range series {
			v := math.NaN()
			for _, l := range strings.Split(body, "\n") {
				if n, ok := strings.CutPrefix(l, s+" "); ok {
					v, _ = strconv.ParseFloat(n, 64)
				}
			}
			out = append(out, v)
		}
		return out, nil
	}
	observed := func(what string, before []float64) []float64 {
		var now []float64
		e.waitUntil(what+" observed in "+strings.Join(series, " and "), func() (bool, string) {
			var err error
			if now, err = counts(); err != nil {
				return false, err.Error()
			}
			return now[0] > before[0] && now[1] > before[1], fmt.Sprintf("counts %v, before %v", now, before)
		})
		return now
	}

	// Counted from after the daemon's first sync (healthz 200), which is no change of the test's.
	observed("daemon serving /metrics", []float64{-1, -1})
	e.waitHealth("/healthz after the first sync", "/healthz", " 200 ")
	before, err := counts()
	if err != nil {
		t.Fatal(err)
	}
	s := httpService("prog", 40, 1)
	e.createService(s)
	e.waitFor(s.Name+" with its endpoint", func(rs string) bool { return slotsHaveOnly(rs, s, []int{1}) })
	before = observed("new Service", before)

	e.setEndpoints(s, 2)
	e.waitFor(s.Name+" moved to pod-2", func(rs string) bool { return slotsHaveOnly(rs, s, []int{2}) })
	observed("endpoint change", before)
	e.probe(s, 2)
}

// slotsHaveOnly reports whether the slots of s's ClusterIP in the shared endpoint map name
// exactly the pods' addresses (and at least one: a Service without endpoints has no slot).
func slotsHaveOnly(rs string, s fixture.Service, pods []int) bool {
	slots := slotsOf(rs, s)
	return slots != "" && hasExactly(slots, pods)
}

// endpointMapHead opens a shard of the endpoints map in a listing.
var endpointMapHead = regexp.MustCompile(`map endpoints-s[0-9]+ \{`)

// slotsOf is the text of the elements of the endpoints maps of a `nft list ruleset` listing
// whose key starts with s's ClusterIP and port, one a line.
func slotsOf(rs string, s fixture.Service) string {
	prefix := s.ClusterIPs[0].String() + " . tcp . 80 . "
	var out strings.Builder
	for _, block := range endpointMapHead.Split(rs, -1)[1:] {
		if end := strings.Index(block, "\n\t}"); end >= 0 {
			block = block[:end]
		}
		for _, part := range strings.FieldsFunc(block, func(r rune) bool { return r == ',' || r == '\n' || r == '{' || r == '}' }) {
			if part = strings.TrimSpace(part); strings.HasPrefix(part, prefix) {
				out.WriteString(part + "\n")
			}
		}
	}
	return out.String()
}

// waitHealth polls a health endpoint (bounded) until its status line contains want.
func (e *env) waitHealth(what, path, want string) {
	e.t.Helper()
	e.waitUntil(fmt.Sprintf("%s: %s containing %q", what, path, want), func() (bool, string) {
		got := e.health(path)
		return strings.Contains(got, want), got
	})
}
