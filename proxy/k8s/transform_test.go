package k8s

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	apitypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/nftproxy/nftproxy/proxy/annotation"
	"github.com/nftproxy/nftproxy/proxy/model"
)

const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// bookkeeping gives obj's metadata what real clusters add and no proxy reads.
func bookkeeping(m *metav1.ObjectMeta, raw string) {
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:ports":{}}}`)}}}
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "0000-1111"}}
	m.Finalizers = []string{"example.com/keep"}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[lastApplied] = raw
	m.CreationTimestamp = metav1.Unix(1_700_000_000, 0)
	m.ResourceVersion, m.UID = "42", apitypes.UID("uid-"+m.Name)
}

// heavyServices are Services of every shape the model reads, each carrying bookkeeping.
func heavyServices() []*corev1.Service {
	cluster, local := corev1.ServiceInternalTrafficPolicyCluster, corev1.ServiceExternalTrafficPolicyLocal
	distribution := corev1.ServiceTrafficDistributionPreferClose
	base := func(name string) *corev1.Service {
		s := service(name, map[string]string{"app": name, "helm.sh/chart": "web-1.2.3"}, nil)
		s.Spec.Selector = map[string]string{"app": name}
		s.Status.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Ok"}}
		bookkeeping(&s.ObjectMeta, strings.Repeat("x", 2000))
		s.Annotations["service.kubernetes.io/topology-mode"] = "Auto"
		s.Annotations["service.beta.kubernetes.io/aws-load-balancer-type"] = "nlb"
		return s
	}
	ranges := base("rtp")
	ranges.Annotations[annotation.PortRangesKey] = "rtp=16384-16393"
	ranges.Spec.Ports = []corev1.ServicePort{{Name: "rtp", Port: 16384, Protocol: corev1.ProtocolUDP}}
	all := base("any")
	all.Annotations[annotation.AllPortsKey] = "true"
	lb := base("lb")
	lb.Spec.Type = corev1.ServiceTypeLoadBalancer
	lb.Spec.Ports[0].NodePort = 30080
	lb.Spec.ExternalTrafficPolicy, lb.Spec.HealthCheckNodePort = local, 32000
	lb.Spec.InternalTrafficPolicy = &cluster
	lb.Spec.TrafficDistribution = &distribution
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.18.200.1"}}
	named := base("named")
	named.Labels[annotation.ServiceProxyNameLabel] = "nftproxy"
	return []*corev1.Service{base("web"), ranges, all, lb, named}
}

func heavySlice(svc string) *discoveryv1.EndpointSlice {
	s := slice(svc, "198.18.128.11", "198.18.128.12")
	s.Labels["endpointslice.kubernetes.io/managed-by"] = "endpointslice-controller.k8s.io"
	s.Labels["app"] = svc
	s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-01T00:00:00Z", "example.com/other": strings.Repeat("x", 100)}
	bookkeeping(&s.ObjectMeta, strings.Repeat("y", 500))
	// Endpoints as the protobuf decoder leaves them: room for more, every field a pointer of
	// its own; a second address (dual-stack pods list it; the model reads the first); the
	// second endpoint terminating, the third with node hints only.
	s.Endpoints = append(make([]discoveryv1.Endpoint, 0, 4), s.Endpoints...)
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"198.18.128.13"}})
	for i := range s.Endpoints {
		e := &s.Endpoints[i]
		node, zone, host, ready, terminating := testNode, "zone-a", "pod-1", i != 1, i == 1
		e.NodeName, e.Zone, e.Hostname = &node, &zone, &host
		e.Addresses = append(e.Addresses, "fd00:18::"+strings.Repeat("1", i+1))
		e.Conditions = discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: &terminating}
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: testNS, Name: "web-abc", UID: "pod-uid"}
		e.DeprecatedTopology = map[string]string{"kubernetes.io/hostname": node}
		e.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: zone}}, ForNodes: []discoveryv1.ForNode{{Name: node}}}
		if i == 2 {
			e.Hints.ForZones = nil
		}
	}
	return s
}

func heavyNode() *corev1.Node {
	n := node(testNode, "198.18.0.1")
	n.Labels = map[string]string{model.LabelTopologyZone: "zone-a", "kubernetes.io/os": "linux"}
	n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: testNode},
		corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.18.200.9"})
	n.Spec.PodCIDR = "198.18.128.0/24"
	n.Spec.Taints = []corev1.Taint{{Key: "ToBeDeletedByClusterAutoscaler", Effect: corev1.TaintEffectNoSchedule}}
	n.Status.Images = []corev1.ContainerImage{{Names: []string{strings.Repeat("registry.example/image@sha256:", 10)}, SizeBytes: 1}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	bookkeeping(&n.ObjectMeta, strings.Repeat("z", 500))
	return n
}

func jsonSize(t *testing.T, obj any) int {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

// TestSlimKeepsWhatTheModelReads: the model (Services with their endpoints, the Node), the
// service-proxy-name rule and the drain check see the same thing in a slimmed object as in the
// original, while the slimmed objects are a fraction of the size.
func TestSlimKeepsWhatTheModelReads(t *testing.T) {
	for _, svc := range heavyServices() {
		sl := heavySlice(svc.Name)
		want := model.FromService(svc, []*discoveryv1.EndpointSlice{sl})
		slim := newSlimmer().transform
		slimSvc, _ := slim(svc.DeepCopy())
		slimSlice, _ := slim(heavySlice(svc.Name))
		got := model.FromService(slimSvc.(*corev1.Service), []*discoveryv1.EndpointSlice{slimSlice.(*discoveryv1.EndpointSlice)})
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: model of the slimmed objects\n got %+v\nwant %+v", svc.Name, got.Service, want.Service)
		}
		for _, proxy := range []string{"", "nftproxy"} {
			if g, w := model.HandlesService(slimSvc.(*corev1.Service).Labels, proxy), model.HandlesService(svc.Labels, proxy); g != w {
				t.Errorf("%s: handled by %q: got %v, want %v", svc.Name, proxy, g, w)
			}
		}
		if o, s := jsonSize(t, svc)+jsonSize(t, sl), jsonSize(t, slimSvc)+jsonSize(t, slimSlice); s*3 > o {
			t.Errorf("%s: slimmed Service and slice take %d bytes of JSON, want under a third of %d", svc.Name, s, o)
		}
		for k := range slimSvc.(*corev1.Service).Annotations {
			if !strings.HasPrefix(k, "nftproxy.io/") {
				t.Errorf("%s: slimmed Service keeps annotation %s, which the model does not read", svc.Name, k)
			}
		}
		if g, w := slimSvc.(*corev1.Service).Labels, svc.Labels[annotation.ServiceProxyNameLabel]; len(g) > 1 || g[annotation.ServiceProxyNameLabel] != w {
			t.Errorf("%s: labels of the slimmed Service: got %v, want only the service-proxy-name label (%q)", svc.Name, g, w)
		}
		if g, w := slimSlice.(*discoveryv1.EndpointSlice).Annotations, map[string]string{corev1.EndpointsLastChangeTriggerTime: sl.Annotations[corev1.EndpointsLastChangeTriggerTime]}; !reflect.DeepEqual(g, w) {
			t.Errorf("%s: annotations of the slimmed slice: got %v, want only the trigger time %v", svc.Name, g, w)
		}
		again, _ := slim(slimSvc.(*corev1.Service).DeepCopy())
		if !reflect.DeepEqual(again, slimSvc) {
			t.Errorf("%s: slim is not idempotent", svc.Name)
		}
		if again, _ := slim(slimSlice.(*discoveryv1.EndpointSlice).DeepCopy()); !reflect.DeepEqual(again, slimSlice) {
			t.Errorf("%s: slim is not idempotent on the slice", svc.Name)
		}
		checkPackedEndpoints(t, svc.Name, slimSlice.(*discoveryv1.EndpointSlice).Endpoints)
		if g, w := model.ParseEndpointSlice(slimSlice.(*discoveryv1.EndpointSlice)).Endpoints, model.ParseEndpointSlice(sl).Endpoints; !reflect.DeepEqual(g, w) {
			t.Errorf("%s: the model reads the slimmed slice as %+v, the slice as sent as %+v", svc.Name, g, w)
		}
	}

	n := heavyNode()
	slim := newSlimmer().transform
	s, _ := slim(n.DeepCopy())
	slimNode := s.(*corev1.Node)
	if g, w := NodeDraining(slimNode), NodeDraining(n); g != w || w == "" {
		t.Errorf("drain reason of the slimmed Node: got %q, want %q", g, w)
	}
	modelOf := func(n *corev1.Node) *model.Node {
		tr := model.NewTracker(model.TrackerConfig{NodeName: testNode, Logger: logr.Discard()})
		tr.UpsertNode(n)
		return tr.Snapshot().Node
	}
	if g, w := modelOf(slimNode), modelOf(n); !reflect.DeepEqual(g, w) {
		t.Errorf("model of the slimmed Node:\n got %+v\nwant %+v", g, w)
	}
	if len(slimNode.Status.Images) != 0 || slimNode.Annotations != nil || slimNode.ManagedFields != nil {
		t.Errorf("slimmed Node keeps images, annotations or managedFields: %+v", slimNode)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "default/web", Obj: heavyServices()[0]}
	if got, err := slim(tomb); err != nil || !reflect.DeepEqual(got, tomb) {
		t.Errorf("a tombstone must pass unchanged: got %v, %v", got, err)
	}
}

// checkPackedEndpoints: the endpoints of a slimmed slice keep one address, no targetRef, hostname,
// topology, share their condition and node-name pointers and fill their array; their hints
// (zones and nodes) are kept, their names shared.
func checkPackedEndpoints(t *testing.T, name string, eps []discoveryv1.Endpoint) {
	t.Helper()
	if cap(eps) != len(eps) {
		t.Errorf("%s: endpoint array of %d has room for %d", name, len(eps), cap(eps))
	}
	for i := range eps {
		e, first := &eps[i], &eps[0]
		if len(e.Addresses) != 1 || e.TargetRef != nil || e.Hostname != nil || e.DeprecatedTopology != nil {
			t.Errorf("%s: endpoint %d keeps what the model does not read: %+v", name, i, e)
		}
		if e.NodeName != first.NodeName || e.Zone != first.Zone {
			t.Errorf("%s: endpoint %d: node name and zone not shared with endpoint 0", name, i)
		}
		if e.Hints == nil || len(e.Hints.ForNodes) != 1 || e.Hints.ForNodes[0].Name != *e.NodeName {
			t.Errorf("%s: endpoint %d: node hints %+v, want the one for %s kept", name, i, e.Hints, *e.NodeName)
		} else if unsafe.StringData(e.Hints.ForNodes[0].Name) != unsafe.StringData(*first.NodeName) {
			t.Errorf("%s: endpoint %d: node hint's name not shared with the node name", name, i)
		}
		if e.Conditions.Ready != first.Conditions.Ready && e.Conditions.Ready != first.Conditions.Terminating {
			t.Errorf("%s: endpoint %d: ready condition not one of the shared pointers", name, i)
		}
	}
}

// TestSourceCachesSlimObjects: what the informers hold (and the Tracker shares) is the slimmed
// object, not what the API server sent.
func TestSourceCachesSlimObjects(t *testing.T) {
	svc := heavyServices()[0]
	client := fake.NewClientset([]runtime.Object{svc, heavySlice(svc.Name), heavyNode()}...)
	src, tr := runSource(t, client, time.Millisecond)

	cached := src.lookup(model.ServiceKey{Namespace: testNS, Name: svc.Name})
	if cached == nil {
		t.Fatal("the Service is not in the informer's cache")
	}
	if _, ok := cached.Annotations[lastApplied]; ok || cached.ManagedFields != nil || cached.OwnerReferences != nil || cached.Spec.Selector != nil {
		keys := []string{}
		for k := range cached.Annotations {
			keys = append(keys, k)
		}
		t.Errorf("cached Service keeps what no proxy reads: annotations %v, managedFields %d, owners %d, selector %v",
			keys, len(cached.ManagedFields), len(cached.OwnerReferences), cached.Spec.Selector)
	}
	if got := endpointsOf(tr, svc.Name); len(got) != 3 {
		t.Errorf("endpoints of %s in the model: got %v, want 3", svc.Name, got)
	}
}

// TestStoreKeepsTheParsedSlice: the slice informer keeps a slice as its metadata and the model's
// parsed form of the original (the same as parsing the API object), once: storing it again, or
// a cache's deep copy, shares the parsed form.
func TestStoreKeepsTheParsedSlice(t *testing.T) {
	for _, svc := range heavyServices() {
		orig := heavySlice(svc.Name)
		orig.ResourceVersion = "42"
		want := model.ParseEndpointSlice(orig.DeepCopy())
		st := newSlimmer().store
		got, err := st(orig)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := got.(*parsedSlice)
		if !ok {
			t.Fatalf("%s: store gave %T, want *parsedSlice", svc.Name, got)
		}
		if !reflect.DeepEqual(p.parsed, want) {
			t.Errorf("%s: parsed slice\n got %+v\nwant %+v", svc.Name, p.parsed, want)
		}
		checkCacheMeta(t, p, &orig.ObjectMeta)
		again, _ := st(p)
		if c := p.DeepCopyObject().(*parsedSlice); again != p || c.parsed != p.parsed {
			t.Errorf("%s: storing again or deep-copying made another parsed form", svc.Name)
		}
	}
}

// TestStorePacksTheService: the Service informer keeps a Service as its metadata and the
// slimmed object packed, which decodes to exactly the slimmed object; storing it again, or a
// cache's deep copy, shares the packing; lookups and tombstones see the decoded Service.
func TestStorePacksTheService(t *testing.T) {
	for _, svc := range heavyServices() {
		orig := svc.DeepCopy()
		orig.ResourceVersion = "42"
		want, _ := newSlimmer().transform(orig.DeepCopy())
		st := newSlimmer().store
		got, err := st(orig)
		if err != nil {
			t.Fatal(err)
		}
		p, ok := got.(*packedService)
		if !ok {
			t.Fatalf("%s: store gave %T, want *packedService", svc.Name, got)
		}
		if dec := p.packed.Service(); !reflect.DeepEqual(dec, want) {
			t.Errorf("%s: packed Service decodes to\n got %+v\nwant %+v", svc.Name, dec, want)
		}
		checkCacheMeta(t, p, &orig.ObjectMeta)
		again, _ := st(p)
		if c := p.DeepCopyObject().(*packedService); again != p || c.packed != p.packed {
			t.Errorf("%s: storing again or deep-copying made another packing", svc.Name)
		}
		for _, obj := range []any{p, cache.DeletedFinalStateUnknown{Key: "k", Obj: p}} {
			if s := serviceOf(obj); !reflect.DeepEqual(s, want) {
				t.Errorf("%s: serviceOf(%T) = %+v, want the slimmed Service", svc.Name, obj, s)
			}
		}
	}
}

// checkCacheMeta: what an informer reads of a cached object through meta.Accessor (its key,
// resource version, generation, UID, deletion timestamp) is the API object's.
func checkCacheMeta(t *testing.T, obj runtime.Object, want *metav1.ObjectMeta) {
	t.Helper()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatalf("meta.Accessor(%T): %v", obj, err)
	}
	if key, err := cache.MetaNamespaceKeyFunc(obj); err != nil || key != want.Namespace+"/"+want.Name {
		t.Errorf("%T: cache key %q (%v), want %s/%s", obj, key, err, want.Namespace, want.Name)
	}
	if m.GetResourceVersion() != want.ResourceVersion || m.GetUID() != want.UID || m.GetGeneration() != want.Generation ||
		m.GetDeletionTimestamp() != want.DeletionTimestamp {
		t.Errorf("%T: metadata rv %s uid %s generation %d deletion %v, want %s %s %d %v", obj, m.GetResourceVersion(), m.GetUID(),
			m.GetGeneration(), m.GetDeletionTimestamp(), want.ResourceVersion, want.UID, want.Generation, want.DeletionTimestamp)
	}
}

// TestCachedObjectSize: what the Service and EndpointSlice caches keep per object besides the
// packing or the parsed slice stays within the 96-byte size class (an embedded ObjectMeta and
// TypeMeta took 264 bytes: 5 MB at 10k Services and their slices).
func TestCachedObjectSize(t *testing.T) {
	for name, size := range map[string]uintptr{"packedService": unsafe.Sizeof(packedService{}), "parsedSlice": unsafe.Sizeof(parsedSlice{})} {
		if size > 96 {
			t.Errorf("%s takes %d bytes, want at most 96", name, size)
		}
	}
}
