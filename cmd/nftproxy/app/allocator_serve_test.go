package app

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/controller"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAllocatorEndpoints runs a controller on a fake API server behind the allocator's
// listeners: /healthz is unready until the replica has read the Lease, then names the leader;
// /livez is up throughout; /metrics, on its own address, shows the leader gauge turn to 1 and
// the allocator's numbers.
func TestAllocatorEndpoints(t *testing.T) {
	var c *controller.Controller
	reg, am, err := allocatorRegistry(func() bool { return c != nil && c.IsLeader() })
	if err != nil {
		t.Fatal(err)
	}
	c, err = controller.New(controller.Config{Client: fake.NewClientset(), BlockRange: allocator.MustParseRange("20000-29999"),
		Identity: "replica-a", LeaseNamespace: "kube-system", LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond,
		RetryPeriod: 100 * time.Millisecond, Observer: am, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	addrs, stop, err := serveAllocator(logr.Discard(), "127.0.0.1:0", "127.0.0.2:0", time.Second, c, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if len(addrs) != 2 {
		t.Fatalf("listeners: got %v, want health and metrics apart", addrs)
	}
	health, metricsURL := "http://"+addrs[0].String(), "http://"+addrs[1].String()
	if code, body := get(t, health+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "Lease has not been read") {
		t.Errorf("/healthz before the election: %d %s, want 503 saying the Lease was not read", code, body)
	}
	if code, _ := get(t, health+"/livez"); code != http.StatusOK {
		t.Errorf("/livez before the election: %d, want 200", code)
	}
	if code, body := get(t, metricsURL+"/metrics"); code != http.StatusOK || !strings.Contains(body, "nftproxy_allocator_leader 0") {
		t.Errorf("/metrics before the election: %d, want nftproxy_allocator_leader 0 in:\n%.2000s", code, body)
	}
	if code, _ := get(t, metricsURL+"/healthz"); code != http.StatusNotFound {
		t.Errorf("/healthz on the metrics address: %d, want 404 (separate listeners)", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	var body string
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		var code int
		code, body = get(t, health+"/healthz")
		var st struct {
			Leader   string `json:"leader"`
			IsLeader bool   `json:"isLeader"`
		}
		return code == http.StatusOK && json.Unmarshal([]byte(body), &st) == nil && st.Leader == "replica-a" && st.IsLeader, nil
	})
	if err != nil {
		t.Fatalf("/healthz never named replica-a as leader: %s", body)
	}
	_, m := get(t, metricsURL+"/metrics")
	for _, want := range []string{"nftproxy_allocator_leader 1", "nftproxy_nodeport_allocator_available_ports 10000", "go_goroutines"} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics while leading lacks %q", want)
		}
	}
}

// TestAllocatorServeOneAddress: equal addresses give one listener with every path; a port in
// use (another replica on the node) is not fatal: it is served once the port is free.
func TestAllocatorServeOneAddress(t *testing.T) {
	c, err := controller.New(controller.Config{Client: fake.NewClientset(), BlockRange: allocator.MustParseRange("20000-29999"),
		Identity: "a", LeaseNamespace: "kube-system"})
	if err != nil {
		t.Fatal(err)
	}
	reg, _, err := allocatorRegistry(c.IsLeader)
	if err != nil {
		t.Fatal(err)
	}
	addrs, stop, err := serveAllocator(logr.Discard(), "127.0.0.1:0", "127.0.0.1:0", time.Second, c, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if len(addrs) != 1 {
		t.Fatalf("listeners: got %v, want one", addrs)
	}
	for path, want := range map[string]int{"/livez": 200, "/healthz": 503, "/metrics": 200} {
		if code, _ := get(t, "http://"+addrs[0].String()+path); code != want {
			t.Errorf("%s: %d, want %d", path, code, want)
		}
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := taken.Addr().String()
	bound, stop2, err := serveAllocator(logr.Discard(), addr, "", 50*time.Millisecond, c, reg)
	if err != nil || len(bound) != 0 {
		t.Fatalf("port in use: got %v, %v; want no error and nothing bound yet", bound, err)
	}
	defer stop2()
	taken.Close()
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get("http://" + addr + "/livez")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Errorf("the freed port %s was never served: %v", addr, err)
	}
	if _, _, err := serveAllocator(logr.Discard(), "203.0.113.1:1", "", time.Second, c, reg); err == nil ||
		!strings.Contains(err.Error(), "--healthz-bind-address") {
		t.Errorf("an address not on this host: got %v, want an error naming the flag", err)
	}
}
