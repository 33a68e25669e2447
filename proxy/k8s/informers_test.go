package k8s

import (
	"errors"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestListPages: paged consistent lists only from an API server that serves them from its
// watch cache (1.34 on); a version that cannot be read is asked again at the next list.
func TestListPages(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"v1.34.0", true},
		{"v1.34.4-gke.1200", true},
		{"v1.35.1", true},
		{"v2.0.0", true},
		{"v1.33.7", false},
		{"v1.31.0+k3s1", false},
		{"", false},
	} {
		t.Run(tc.version, func(t *testing.T) {
			client := fake.NewClientset()
			client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: tc.version}
			p := &listPages{server: client.Discovery(), log: logr.Discard()}
			if got := p.supported(); got != tc.want {
				t.Errorf("paged lists from %q: got %v, want %v", tc.version, got, tc.want)
			}
		})
	}

	client := fake.NewClientset()
	fd := client.Discovery().(*fakediscovery.FakeDiscovery)
	fd.FakedServerVersion = &version.Info{GitVersion: "v1.34.4"}
	asked := 0
	fd.PrependReactor("get", "version", func(k8stesting.Action) (bool, runtime.Object, error) {
		asked++
		if asked == 1 {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})
	p := &listPages{server: fd, log: logr.Discard()}
	if p.supported() {
		t.Error("paged lists while the version cannot be read")
	}
	if !p.supported() || !p.supported() || asked != 2 {
		t.Errorf("after a failure: want paged lists from v1.34.4 and the version asked once more, asked %d times", asked)
	}
}

// TestSourcePagesLists: the initial lists of Services and EndpointSlices are consistent paged
// lists against an API server that serves them from its cache, the reflector's resourceVersion
// "0" (one response) otherwise.
func TestSourcePagesLists(t *testing.T) {
	for _, tc := range []struct {
		version string
		wantRV  string
	}{{"v1.34.4", ""}, {"v1.33.7", "0"}} {
		t.Run(tc.version, func(t *testing.T) {
			client := fake.NewClientset(service("web", nil, nil), slice("web", "198.18.128.11"))
			client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: tc.version}
			runSource(t, client, 0)
			lists := map[string]metav1.ListOptions{}
			for _, a := range client.Actions() {
				if l, ok := a.(k8stesting.ListActionImpl); ok {
					lists[l.GetResource().Resource] = l.ListOptions
				}
			}
			for _, r := range []string{"services", "endpointslices", "nodes"} {
				o, ok := lists[r]
				if !ok {
					t.Errorf("%s not listed; actions: %v", r, client.Actions())
					continue
				}
				if o.ResourceVersion != tc.wantRV || o.Limit <= 0 {
					t.Errorf("%s listed with resourceVersion %q, limit %d: want %q and a limit", r, o.ResourceVersion, o.Limit, tc.wantRV)
				}
			}
		})
	}
}
