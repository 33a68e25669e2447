package k8s

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// Address plan: ClusterIPs from 198.19.0.0/18, pods from 198.18.128.0/24, node 198.18.0.1.
const (
	testNode = "node-1"
	testNS   = "ns"
)

// waitBound bounds every wait for the informers: a broken source fails instead of hanging.
const waitBound = 30 * time.Second

func TestProxyNameSelectorAgreesWithModel(t *testing.T) {
	labelSets := []map[string]string{
		nil,
		{"app": "web"},
		{annotation.ServiceProxyNameLabel: "nftproxy"},
		{annotation.ServiceProxyNameLabel: "other"},
		{annotation.ServiceProxyNameLabel: ""},
	}
	for _, proxyName := range []string{"", "nftproxy"} {
		sel, err := ProxyNameSelector(proxyName)
		if err != nil {
			t.Fatalf("ProxyNameSelector(%q): %v", proxyName, err)
		}
		for _, ls := range labelSets {
			t.Run(fmt.Sprintf("%q/%v", proxyName, ls), func(t *testing.T) {
				got := sel.Matches(labels.Set(ls))
				want := model.HandlesService(ls, proxyName)
				if got != want {
					t.Errorf("selector %q matches %v: got %v, want %v (model.HandlesService)", sel, ls, got, want)
				}
			})
		}
	}
}

func TestProxyNameSelector(t *testing.T) {
	tests := []struct {
		proxyName string
		labels    map[string]string
		want      bool
		wantErr   bool
	}{
		{proxyName: "", labels: map[string]string{HeadlessLabel: ""}, want: false},
		{proxyName: "x", labels: map[string]string{annotation.ServiceProxyNameLabel: "x", HeadlessLabel: ""}, want: false},
		{proxyName: "not a label value!", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%q/%v", tc.proxyName, tc.labels), func(t *testing.T) {
			sel, err := ProxyNameSelector(tc.proxyName)
			if (err != nil) != tc.wantErr {
				t.Fatalf("got error %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if got := sel.Matches(labels.Set(tc.labels)); got != tc.want {
				t.Errorf("selector %q matches %v: got %v, want %v", sel, tc.labels, got, tc.want)
			}
		})
	}
}

func TestNewRejectsIncompleteConfig(t *testing.T) {
	client := fake.NewClientset()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no client", Config{NodeName: testNode}},
		{"no node name", Config{Client: client}},
		{"bad proxy name", Config{Client: client, NodeName: testNode, ProxyName: "-bad-"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Errorf("New(%+v): got nil error, want one", tc.cfg)
			}
		})
	}
}

func service(name string, lbls map[string]string, annotations map[string]string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name, Labels: lbls, Annotations: annotations, UID: types.UID("uid-" + name)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "198.19.0.1", ClusterIPs: []string{"198.19.0.1"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}
}

func slice(service string, addrs ...string) *discoveryv1.EndpointSlice {
	port, proto, name := int32(8080), corev1.ProtocolTCP, "http"
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: testNS, Name: service + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}})
	}
	return s
}

func node(name, addr string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr}}}}
}

// endpointsOf lists the endpoint addresses the model holds for a Service, or nil if the model
// does not hold it.
func endpointsOf(tr *model.Tracker, name string) []string {
	s := tr.Service(model.ServiceKey{Namespace: testNS, Name: name})
	if s == nil {
		return nil
	}
	out := []string{}
	for _, p := range s.Ports {
		for _, e := range p.Endpoints {
			out = append(out, e.Addr.String())
		}
	}
	return out
}

// waitUntil polls cond (bounded by waitBound) and fails with what when it never holds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not true after %v", what, waitBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSourceFeedsTracker(t *testing.T) {
	objs := []runtime.Object{
		service("web", nil, nil),
		slice("web", "198.18.128.11"),
		service("theirs", map[string]string{annotation.ServiceProxyNameLabel: "other"}, nil),
		node(testNode, "198.18.0.1"),
		node("node-2", "198.18.0.9"),
	}
	client := fake.NewClientset(objs...)
	tr := model.NewTracker(model.TrackerConfig{NodeName: testNode, Logger: logr.Discard()})
	rec := events.NewFakeRecorder(10)
	src, err := New(Config{Client: client, NodeName: testNode, Logger: logr.Discard(), Events: rec, ScanPeriod: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if src.Ready() {
		t.Fatal("Ready before Run: got true, want false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, tr, func() {}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v, want nil after cancel", err)
		}
	}()
	waitUntil(t, "source ready", src.Ready)

	// Ready means the initial lists are in the tracker already.
	if got := endpointsOf(tr, "web"); len(got) != 1 || got[0] != "198.18.128.11" {
		t.Errorf("web endpoints at Ready: got %v, want [198.18.128.11]", got)
	}
	if s := tr.Service(model.ServiceKey{Namespace: testNS, Name: "theirs"}); s != nil {
		t.Errorf("Service labelled for another proxy: got %+v in the model, want nothing", s)
	}
	if n := tr.Snapshot().Node; n == nil || n.Name != testNode {
		t.Errorf("node at Ready: got %+v, want %s", n, testNode)
	}

	steps := []struct {
		name   string
		change func(context.Context) error
		want   []string
	}{
		{"slice gains an endpoint", func(ctx context.Context) error {
			_, err := client.DiscoveryV1().EndpointSlices(testNS).Update(ctx, slice("web", "198.18.128.11", "198.18.128.12"), metav1.UpdateOptions{})
			return err
		}, []string{"198.18.128.11", "198.18.128.12"}},
		{"slice deleted", func(ctx context.Context) error {
			return client.DiscoveryV1().EndpointSlices(testNS).Delete(ctx, "web-1", metav1.DeleteOptions{})
		}, []string{}},
		{"service deleted", func(ctx context.Context) error {
			return client.CoreV1().Services(testNS).Delete(ctx, "web", metav1.DeleteOptions{})
		}, nil},
	}
	for _, st := range steps {
		if err := st.change(ctx); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		waitUntil(t, st.name, func() bool {
			got := endpointsOf(tr, "web")
			return fmt.Sprint(got) == fmt.Sprint(st.want) && (got == nil) == (st.want == nil)
		})
	}
}

func TestSourceReportsRejection(t *testing.T) {
	bad := service("rtp", nil, map[string]string{annotation.PortRangesKey: "http=80-70"})
	client := fake.NewClientset(bad)
	tr := model.NewTracker(model.TrackerConfig{NodeName: testNode, Logger: logr.Discard()})
	rec := events.NewFakeRecorder(10)
	src, err := New(Config{Client: client, NodeName: testNode, Logger: logr.Discard(), Events: rec, ScanPeriod: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, tr, func() {}) }()
	defer func() { cancel(); <-done }()

	select {
	case e := <-rec.Events:
		want := "Warning " + model.ReasonRangeEndBeforeStart + " "
		if len(e) < len(want) || e[:len(want)] != want {
			t.Errorf("event: got %q, want one starting with %q", e, want)
		}
	case <-time.After(waitBound):
		t.Fatalf("no Event for a Service with a bad annotation after %v", waitBound)
	}
	// A change that keeps the same rejection sends nothing more.
	bad.Spec.PublishNotReadyAddresses = true
	if _, err := client.CoreV1().Services(testNS).Update(ctx, bad, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "spec change seen", func() bool {
		obj := src.lookup(model.ServiceKey{Namespace: testNS, Name: "rtp"})
		return obj != nil && obj.Spec.PublishNotReadyAddresses
	})
	// Deleting the Service empties the model; then no Event can be pending for it.
	if err := client.CoreV1().Services(testNS).Delete(ctx, "rtp", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "service deleted", func() bool { return len(tr.Snapshot().Services) == 0 })
	select {
	case e := <-rec.Events:
		t.Errorf("got a second event %q for an unchanged rejection, want none", e)
	default:
	}
}

// runSource runs a Source over client with a fresh Tracker until the test ends, and waits
// until it is ready.
func runSource(t *testing.T, client *fake.Clientset, scan time.Duration) (*Source, *model.Tracker) {
	t.Helper()
	tr := model.NewTracker(model.TrackerConfig{NodeName: testNode, Logger: logr.Discard()})
	src, err := New(Config{Client: client, NodeName: testNode, Logger: logr.Discard(), Events: events.NewFakeRecorder(10), ScanPeriod: scan})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, tr, func() {}) }()
	t.Cleanup(func() { cancel(); <-done })
	waitUntil(t, "source ready", src.Ready)
	return src, tr
}
