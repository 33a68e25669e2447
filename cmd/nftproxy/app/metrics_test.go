package app

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/health"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// TestRESTClientRequestsCounted builds the API client as the daemon does (restConfig, then
// kubernetes.NewForConfig) against a fake API server, makes one request, and finds it in
// rest_client_requests_total on the registry the daemon's metrics go to, and the transport it
// took in rest_client_transport_create_calls_total.
func TestRESTClientRequestsCounted(t *testing.T) {
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"major":"1","minor":"34","gitVersion":"v1.34.4"}`))
	}))
	defer api.Close()
	reg := prometheus.NewPedanticRegistry()
	if err := registerComponentMetrics(reg); err != nil {
		t.Fatal(err)
	}
	o := &Options{Master: api.URL}
	cfg, err := o.restConfig()
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Discovery().ServerVersion(); err != nil {
		t.Fatalf("request to the fake API server: %v", err)
	}
	host := mustHost(t, api.URL)
	if got := requestCount(t, reg, "200", "GET", host); got != 1 {
		t.Errorf("%s{code=200,method=GET,host=%s} = %v, want 1", metrics.RESTRequests, host, got)
	}
	if n, err := testutil.GatherAndCount(reg, metrics.RESTRequestDuration); err != nil || n != 1 {
		t.Errorf("%s: %d series (err %v), want 1", metrics.RESTRequestDuration, n, err)
	}
	// Building the client asked client-go's transport cache for a transport.
	if n, err := testutil.GatherAndCount(reg, metrics.RESTTransportCreateCalls); err != nil || n == 0 {
		t.Errorf("%s: %d series (err %v), want some", metrics.RESTTransportCreateCalls, n, err)
	}
	if lint, err := testutil.GatherAndLint(reg, metrics.RESTRequests, metrics.RESTRequestDuration, metrics.BuildInfo,
		metrics.RESTExecCertTTL, metrics.RESTExecCertRotationAge, metrics.RESTTransportCacheEntries,
		metrics.RESTTransportCreateCalls, metrics.RESTTransportCertGCCalls); err != nil || len(lint) > 0 {
		t.Errorf("lint: %v %v", lint, err)
	}
}

func mustHost(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// requestCount returns the rest_client_requests_total series with these labels, failing the
// test if the registry has none.
func requestCount(t *testing.T, reg *prometheus.Registry, code, method, host string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != metrics.RESTRequests {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["code"] == code && labels["method"] == method && labels["host"] == host {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s series with code %s, method %s, host %s", metrics.RESTRequests, code, method, host)
	return 0
}

// freeAddress returns a loopback address with a port nothing listens on (for serve, which
// takes addresses, not listeners).
func freeAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestProfiling starts the daemon's servers as run does and asks for Go's profiles: absent
// (404) without --profiling, served on the metrics address with it, also when health and
// metrics share one address; /metrics is served in every case.
func TestProfiling(t *testing.T) {
	for _, c := range []struct {
		name      string
		profiling bool
		shared    bool
	}{
		{"default", false, false},
		{"--profiling", true, false},
		{"--profiling, health and metrics on one address", true, true},
		{"default, health and metrics on one address", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			metricsAddr, healthAddr := freeAddress(t), freeAddress(t)
			if c.shared {
				healthAddr = metricsAddr
			}
			args := []string{"--metrics-bind-address", metricsAddr, "--healthz-bind-address", healthAddr}
			if c.profiling {
				args = append(args, "--profiling")
			}
			var o Options
			if err := parseFlags("run", &o, runFlags, args, io.Discard); err != nil {
				t.Fatal(err)
			}
			stop, err := serve(t.Context(), logr.Discard(), &o, &health.State{}, prometheus.NewRegistry(), http.NotFoundHandler())
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			want := http.StatusNotFound
			if c.profiling {
				want = http.StatusOK
			}
			for path, code := range map[string]int{"/metrics": http.StatusOK, "/debug/pprof/": want, "/debug/pprof/cmdline": want, "/debug/pprof/goroutine?debug=1": want} {
				resp, err := http.Get("http://" + metricsAddr + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != code {
					t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, code)
				}
			}
		})
	}
}

// TestQueuingRecordsWaitingChanges: a notification of the sync loop sets kube-proxy's
// last-queued timestamp only when changes wait for it, and always reaches the loop.
func TestQueuingRecordsWaitingChanges(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	pm, err := metrics.NewProxy(reg, nil, nft.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	tracker := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
	notified := 0
	notify := queuing(pm, tracker, func() { notified++ })
	queued := func() int {
		n, err := testutil.GatherAndCount(reg, metrics.KubeProxyLastQueued)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	notify()
	if notified != 1 || queued() != 0 {
		t.Fatalf("nothing waiting: notified %d, %d last-queued series; want 1, 0", notified, queued())
	}
	tracker.UpsertService(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: "198.19.0.10", ClusterIPs: []string{"198.19.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}})
	notify()
	if notified != 2 || queued() != 1 {
		t.Fatalf("a change waiting: notified %d, %d last-queued series; want 2, 1", notified, queued())
	}
}
