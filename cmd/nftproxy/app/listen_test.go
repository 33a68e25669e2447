package app

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/proxy/health"
)

// takenPort holds a loopback port, as kube-proxy holds 10256 beside nftproxy; release frees it.
func takenPort(t *testing.T) (addr string, release func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), func() { ln.Close() }
}

func healthState() *health.State {
	return &health.State{LastSuccess: time.Now, FailingSince: func() time.Time { return time.Time{} },
		PendingSince: func() time.Time { return time.Time{} }, Ready: func() bool { return true },
		SourceFailingSince: func() time.Time { return time.Time{} }, Timeout: time.Minute, Now: time.Now}
}

// TestServeRetriesATakenPort: a healthz port held by another process is not fatal: serve
// returns, reports the listener down, and serves once the port is free (kube-proxy's
// semantics without --bind-address-hard-fail).
func TestServeRetriesATakenPort(t *testing.T) {
	addr, release := takenPort(t)
	o := &Options{HealthzAddress: addr}
	reg := prometheus.NewRegistry()
	stop, err := serve(t.Context(), newLogger(0, io.Discard), o, healthState(), reg, http.NotFoundHandler())
	if err != nil {
		t.Fatalf("serve with the healthz port taken: %v (want a retry, not an exit)", err)
	}
	defer stop()
	up := func() float64 { return listenerUp(t, reg, metrics.ServerHealthz) }
	if got := up(); got != 0 {
		t.Errorf("%s{server=healthz} = %v while the port is taken, want 0", metrics.ListenerUp, got)
	}
	release()
	deadline := time.Now().Add(4 * listenRetry)
	for {
		r, err := http.Get("http://" + addr + "/livez")
		if err == nil {
			r.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("healthz never served after the port was freed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := up(); got != 1 {
		t.Errorf("%s{server=healthz} = %v once serving, want 1", metrics.ListenerUp, got)
	}
}

// TestServeHardFail: with --bind-address-hard-fail a taken port is an error naming it.
func TestServeHardFail(t *testing.T) {
	addr, _ := takenPort(t)
	o := &Options{MetricsAddress: addr, BindAddressHardFail: true}
	stop, err := serve(context.Background(), newLogger(0, io.Discard), o, healthState(), prometheus.NewRegistry(), http.NotFoundHandler())
	if err == nil {
		stop()
		t.Fatal("serve succeeded with the metrics port taken and --bind-address-hard-fail")
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name %s", err, addr)
	}
}

// listenerUp reads nftproxy_listener_up{server} from reg.
func listenerUp(t *testing.T, reg *prometheus.Registry, server string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == metrics.ListenerUp && l.GetName() == "server" && l.GetValue() == server {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("%s{server=%s} not exposed", metrics.ListenerUp, server)
	return 0
}
