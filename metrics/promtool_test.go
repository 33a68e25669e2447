package metrics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/localports"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
)

// daemonRegistry builds every nftproxy collector on a fresh registry, as the daemon does, and
// feeds each one an observation so that every family (histogram vectors included) is exposed.
func daemonRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	p, err := NewProxy(reg, model.AllReasons())
	if err != nil {
		t.Fatal(err)
	}
	p.Synced(true, time.Second, reconciler.Result{Full: true, Ops: 10, Repairs: 1,
		Objects: map[nft.Family]reconciler.Counts{nft.IPv4: {Chains: 3, Rules: 4, Sets: 2, Elements: 9}, nft.IPv6: {Chains: 3}}}, nil)
	p.Synced(false, time.Millisecond, reconciler.Result{Ops: 2}, nil)
	p.Synced(false, time.Millisecond, reconciler.Result{}, errors.New("commit failed"))
	p.Programmed(20 * time.Millisecond)
	p.Rejected(model.ReasonPortOverlap)
	p.Served("/healthz", 200)
	p.Queued()
	p.Served("/livez", 200)
	if err := p.WatchChanges(func() model.ChangeCounts {
		return model.ChangeCounts{ServiceEvents: 3, EndpointSliceEvents: 5, PendingServices: 1, PendingEndpointSliceChanges: 2}
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.WatchNoLocalEndpoints(func() []NoLocalEndpoints {
		return []NoLocalEndpoints{{Family: nft.IPv4, Internal: 1}, {Family: nft.IPv6, External: 2}}
	}); err != nil {
		t.Fatal(err)
	}

	a, err := NewAllocatorMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	a.Counts(10, 90)
	a.Allocated(allocator.ScopeDynamic)
	a.AllocationFailed(allocator.ScopeStatic)

	c, err := NewConntrack(reg)
	if err != nil {
		t.Fatal(err)
	}
	c.ConntrackCleaned("IPv4", 3, time.Millisecond, nil)
	c.ConntrackCleaned("IPv6", 0, time.Millisecond, errors.New("dump interrupted"))

	h, err := NewHealthCheck(reg)
	if err != nil {
		t.Fatal(err)
	}
	h.ListenFailed(32000, errors.New("address in use"))
	h.Listeners(2, 1)

	src, err := NewSource(reg, "manifests")
	if err != nil {
		t.Fatal(err)
	}
	src.Failing("manifests", errors.New("directory missing"))
	src.Follow("apiserver", func() bool { return true })
	d, err := NewDrift(reg)
	if err != nil {
		t.Fatal(err)
	}
	d.Suspected(DriftForeignChange)
	lp, err := NewLocalPorts(reg)
	if err != nil {
		t.Fatal(err)
	}
	lp.Overlap(localports.LabelBlocks, 100)
	ls, err := NewListeners(reg)
	if err != nil {
		t.Fatal(err)
	}
	ls.Up(ServerHealthz, false)
	if err := WatchHealth(reg, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	if err := RegisterBuildInfo(reg, "v0.1.0"); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRESTClient(reg); err != nil {
		t.Fatal(err)
	}
	if err := WatchLeader(reg, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	return reg
}

// scrape serves reg over HTTP as the daemon's /metrics does and returns the text exposition.
func scrape(t *testing.T, reg *prometheus.Registry) []byte {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: status %d, err %v: %s", resp.StatusCode, err, body)
	}
	return body
}

// TestPromtool lints the daemon's whole exposition with `promtool check metrics` (Prometheus'
// own naming and help rules). CI installs promtool with test/deps.sh (Debian package prometheus).
func TestPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not found: install the Debian package prometheus (test/deps.sh does) to lint the exposition")
	}
	body := scrape(t, daemonRegistry(t))
	for _, name := range []string{SyncDuration, KubeProxySync, AllocatorAllocatedPorts, ConntrackDeleted,
		KubeProxyConntrackDeleted, HealthCheckNodePorts, KubeProxyEndpoints, BuildInfo} {
		if !bytes.Contains(body, []byte("# TYPE "+name+" ")) {
			t.Errorf("exposition has no %s; the lint below would not cover it", name)
		}
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("promtool check metrics: %v", err)
	}
	var problems []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" && !kubeProxyLint[l] {
			problems = append(problems, l)
		}
	}
	if len(problems) > 0 {
		t.Errorf("promtool check metrics:\n%s", strings.Join(problems, "\n"))
	}
}

// kubeProxyLint are promtool's findings on names nftproxy takes from kube-proxy as they are:
// renaming them would break the dashboards they are kept for.
var kubeProxyLint = map[string]bool{
	KubeProxyNoLocalEndpoints + ` non-counter metrics should not have "_total" suffix`: true,
}

// dashboard is the part of a Grafana dashboard the test reads.
type dashboard struct {
	Title  string  `json:"title"`
	UID    string  `json:"uid"`
	Panels []panel `json:"panels"`
}

type panel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // collapsed rows hold their panels
}

func (p panel) exprs() []string {
	var out []string
	for _, t := range p.Targets {
		out = append(out, t.Expr)
	}
	for _, c := range p.Panels {
		out = append(out, c.exprs()...)
	}
	return out
}

var metricName = regexp.MustCompile(`\b(?:nftproxy|kubeproxy)_[a-zA-Z0-9_]+`)

// TestDashboard proves the Grafana dashboard parses and queries only metrics the daemon exposes.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile("../deploy/grafana/nftproxy-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard: title %q uid %q, %d panels; want all set", d.Title, d.UID, len(d.Panels))
	}

	families, err := daemonRegistry(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]bool{}
	for _, f := range families {
		name := f.GetName()
		exposed[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exposed[name+s] = true
			}
		}
	}

	queried := map[string]bool{}
	for _, p := range d.Panels {
		exprs := p.exprs()
		if p.Type != "row" && len(exprs) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, e := range exprs {
			names := metricName.FindAllString(e, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no nftproxy or kube-proxy metric", p.Title, e)
			}
			for _, n := range names {
				queried[n] = true
				if !exposed[n] {
					t.Errorf("panel %q: query %q uses %s, which the daemon does not expose", p.Title, e, n)
				}
			}
		}
	}
	// The list: every one of these must be on the dashboard.
	for _, n := range []string{SyncDuration + "_bucket", NetworkProgramming + "_bucket", SyncFailures, DriftRepairs, NFTObjects,
		InvalidServices, ConntrackDeleted, AllocatorAllocatedPorts, AllocatorAvailablePorts} {
		if !queried[n] {
			t.Errorf("dashboard does not show %s", n)
		}
	}
	checkPromQL(t, d)
	if t.Failed() {
		var names []string
		for n := range exposed {
			names = append(names, n)
		}
		sort.Strings(names)
		t.Logf("exposed: %s", strings.Join(names, " "))
	}
}

// checkPromQL has promtool parse every dashboard query (as recording rules, with Grafana's
// variables replaced by values), so a syntax error fails here rather than on a screen.
func checkPromQL(t *testing.T, d dashboard) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not found: dashboard queries not parsed (install the Debian package prometheus)")
		return
	}
	vars := strings.NewReplacer("$__rate_interval", "5m", "$instance", ".*")
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	for _, p := range d.Panels {
		for _, e := range p.exprs() {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query%d", len(rules)), Expr: vars.Replace(e)})
		}
	}
	doc, err := json.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.json") // JSON is YAML
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}
