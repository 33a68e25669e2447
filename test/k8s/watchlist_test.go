package k8s

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/runtime"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"

	"github.com/nftproxy/nftproxy/proxy/k8s"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/cluster"
)

// TestInitialListsAreStreamed: under what the binary sets before anything else
// (k8s.StreamInitialLists), the Kubernetes source takes its initial Services and EndpointSlices
// from this API server as streams (watches with sendInitialEvents), never as lists, and the
// model holds every Service with its endpoints. The daemon tests of this tier run the binary,
// so they all start this way; this one proves the requests are what we say they are and that
// nothing fell back to a list.
func TestInitialListsAreStreamed(t *testing.T) {
	if v, set := os.LookupEnv(k8s.WatchListEnv); set {
		t.Skipf("%s=%s is set: client-go's own setting decides", k8s.WatchListEnv, v)
	}
	c := cluster.Start(t, cluster.Options{SingleStack: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitBound)
	defer cancel()
	e := &env{t: t, ctx: ctx, c: c, cs: c.Client()}
	const services = 5
	for i := range services {
		e.createService(httpService(fmt.Sprintf("stream-%d", i), 10+i, 1, 2, 3))
	}

	prev := clientfeatures.FeatureGates()
	k8s.StreamInitialLists()
	t.Cleanup(func() { clientfeatures.ReplaceFeatureGates(prev) })
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Fatal("StreamInitialLists left client-go's WatchListClient off")
	}

	var (
		mu       sync.Mutex
		requests []string
	)
	rc := c.Admin().RESTConfig()
	rc.ContentType = runtime.ContentTypeProtobuf // as the daemon's client (cmd/nftproxy/app)
	rc.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			mu.Lock()
			requests = append(requests, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
			mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	log := testr.New(t)
	src, err := k8s.New(k8s.Config{Client: client, NodeName: "stream-node", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	tracker := model.NewTracker(model.TrackerConfig{NodeName: "stream-node", Logger: log})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx, tracker, func() {}) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	for deadline := time.Now().Add(waitBound); !src.Ready(); time.Sleep(pollInterval) {
		if time.Now().After(deadline) {
			t.Fatalf("the source was not ready within %v", waitBound)
		}
	}

	snap := tracker.Snapshot()
	for i := range services {
		key := model.ServiceKey{Namespace: testNS, Name: fmt.Sprintf("stream-%d", i)}
		s := snap.Services[key]
		switch {
		case s == nil:
			t.Errorf("Service %s is not in the model", key)
		case s.Rejected != nil:
			t.Errorf("Service %s rejected: %v", key, s.Rejected)
		case len(s.Ports) != 1 || len(s.Ports[0].Endpoints) != 3:
			t.Errorf("Service %s: want one port with 3 endpoints, got %+v", key, s.Ports)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	for _, path := range []string{"/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"} {
		streamed := false
		for _, r := range requests {
			p, query, _ := strings.Cut(strings.TrimPrefix(r, "GET "), "?")
			if p != path {
				continue
			}
			if !strings.Contains(query, "watch=true") {
				t.Errorf("%s was listed, not streamed: %s", path, r)
			}
			streamed = streamed || strings.Contains(query, "sendInitialEvents=true")
		}
		if !streamed {
			t.Errorf("no streamed initial list of %s; requests:\n%s", path, strings.Join(requests, "\n"))
		}
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
