package manifest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

// fullObjects are a Service, an EndpointSlice and a Node with most of their fields set, as
// JSON: every field name the typed decoder must know, every custom decoder it must call
// (intstr, Quantity, Time, MicroTime-free).
func fullObjects(t testing.TB) []string {
	t.Helper()
	when := metav1.NewTime(time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC))
	p := func(s string) *string { return &s }
	i32 := func(v int32) *int32 { return &v }
	b := func(v bool) *bool { return &v }
	pol := corev1.IPFamilyPolicyPreferDualStack
	itp := corev1.ServiceInternalTrafficPolicyLocal
	tcp := corev1.ProtocolTCP
	meta := metav1.ObjectMeta{
		Name: "web", Namespace: "shop", UID: "u-1", ResourceVersion: "7", Generation: 3, CreationTimestamp: when,
		Labels: map[string]string{"app": "web", "tier": ""}, Annotations: map[string]string{"note": "a\nb"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "u-0", Controller: b(true)}},
		Finalizers:      []string{"example.com/keep"},
		ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: &when, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}},
	}
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"}, ObjectMeta: meta,
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10", "fd00::10"},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol}, IPFamilyPolicy: &pol,
			Ports: []corev1.ServicePort{
				{Name: "http", Protocol: corev1.ProtocolTCP, AppProtocol: p("http"), Port: 80, TargetPort: intstr.FromString("web"), NodePort: 30080},
				{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
			},
			Selector: map[string]string{"app": "web"}, ExternalIPs: []string{"192.0.2.1"},
			SessionAffinity: corev1.ServiceAffinityClientIP, SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: i32(60)}},
			LoadBalancerIP: "192.0.2.2", LoadBalancerSourceRanges: []string{"192.0.2.0/24"}, ExternalName: "",
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, HealthCheckNodePort: 31000, PublishNotReadyAddresses: true,
			AllocateLoadBalancerNodePorts: b(false), LoadBalancerClass: p("example.com/lb"), InternalTrafficPolicy: &itp,
			TrafficDistribution: p("PreferClose"),
		},
		Status: corev1.ServiceStatus{
			LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "192.0.2.3", Hostname: "lb.example.com",
				Ports: []corev1.PortStatus{{Port: 80, Protocol: tcp, Error: p("none")}}}}},
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 3, LastTransitionTime: when, Reason: "Ok", Message: "fine"}},
		},
	}
	slice := &discoveryv1.EndpointSlice{
		TypeMeta: metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}, ObjectMeta: meta,
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{"10.244.0.1"},
			Conditions: discoveryv1.EndpointConditions{Ready: b(true), Serving: b(true), Terminating: b(false)},
			Hostname:   p("web-0"), TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: "web-0", UID: "u-2"},
			DeprecatedTopology: map[string]string{"zone": "a"}, NodeName: p("node-1"), Zone: p("a"),
			Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "a"}}, ForNodes: []discoveryv1.ForNode{{Name: "node-1"}}},
		}, {Addresses: []string{"10.244.0.2"}}},
		Ports: []discoveryv1.EndpointPort{{Name: p("http"), Protocol: &tcp, Port: i32(8080), AppProtocol: p("http")}},
	}
	node := &corev1.Node{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"kubernetes.io/hostname": "node-1"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24", PodCIDRs: []string{"10.244.0.0/24"}, ProviderID: "x://1", Unschedulable: true,
			Taints: []corev1.Taint{{Key: "k", Value: "v", Effect: corev1.TaintEffectNoSchedule, TimeAdded: &when}}},
		Status: corev1.NodeStatus{
			Capacity:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
			Allocatable:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3500m")},
			Phase:           corev1.NodeRunning,
			Conditions:      []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: when, LastTransitionTime: when, Reason: "KubeletReady"}},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "198.18.0.1"}, {Type: corev1.NodeHostName, Address: "node-1"}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo:        corev1.NodeSystemInfo{MachineID: "m", KernelVersion: "6.1", KubeletVersion: "v1.34.0", OperatingSystem: "linux", Architecture: "amd64"},
			Images:          []corev1.ContainerImage{{Names: []string{"registry.example/app:1"}, SizeBytes: 1 << 20}},
			VolumesInUse:    []corev1.UniqueVolumeName{"v1"},
		},
	}
	var out []string
	for _, o := range []any{svc, slice, node} {
		js, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(js))
	}
	return out
}

// decodeCases are documents the typed decoder must agree on with universal; accept says
// whether it should decode them itself (false: it leaves them to universal, which refuses
// them or takes them in a way the typed decoder does not). YAML documents are converted as
// the loader converts them first.
var decodeCases = []struct {
	name   string
	doc    string
	accept bool
}{
	{"minimal Service", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":80}]}}`, true},
	{"kind before apiVersion, spaces", ` { "kind" : "Service" , "metadata":{"name":"a"}, "apiVersion" : "v1" } `, true},
	{"type after the body", `{"metadata":{"name":"a","labels":{"k":"v"}},"spec":{"ports":[{"port":80}]},"apiVersion":"v1","kind":"Service"}`, true},
	{"target port as a string", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":80,"targetPort":"80"}]}}`, true},
	{"target port as a number", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":80,"targetPort":8080}]}}`, true},
	{"nulls", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","labels":null,"creationTimestamp":null},"spec":{"ports":null,"clusterIP":null,"ipFamilyPolicy":null,"selector":null},"status":null}`, true},
	{"null target port", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":80,"targetPort":null}]}}`, true},
	{"escapes", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a\u0062","annotations":{"x":"\ud83d\ude00\n\t\"\\\/"}},"spec":{}}`, true},
	{"negative zero port", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":-0}]}}`, true},
	{"slice", `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s"},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":true}}],"ports":[{"port":80}]}`, true},
	{"node", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"status":{"addresses":[{"type":"InternalIP","address":"10.0.0.1"}],"capacity":{"cpu":"2"}}}`, true},

	{"unknown field", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":80,"targetport":8080}]}}`, false},
	{"unknown top-level field", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"extra":1}`, false},
	{"field of another case", `{"apiVersion":"v1","kind":"Service","Metadata":{"name":"a"}}`, false},
	{"duplicate field", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","name":"b"}}`, false},
	{"duplicate kind", `{"apiVersion":"v1","kind":"Service","kind":"Service","metadata":{"name":"a"}}`, false},
	{"duplicate map key", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","labels":{"x":"1","x":"2"}}}`, false},
	{"duplicate in skipped value", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"status":{"capacity":{"cpu":"1","cpu":"2"}}}`, false},
	{"port as a string", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":"80"}]}}`, false},
	{"port as a fraction", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":80.0}]}}`, false},
	{"port with an exponent", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":8e1}]}}`, false},
	{"port out of range", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":4294967296}]}}`, false},
	{"target port as a bool", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":80,"targetPort":true}]}}`, false},
	{"bool as a string", `{"apiVersion":"discovery.k8s.io/v1","kind":"EndpointSlice","metadata":{"name":"s"},"addressType":"IPv4","endpoints":[{"addresses":["10.0.0.1"],"conditions":{"ready":"true"}}]}`, false},
	{"bad quantity", `{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"status":{"capacity":{"cpu":"lots"}}}`, false},
	{"bad time", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a","creationTimestamp":"yesterday"}}`, false},
	{"unclosed", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}`, false},
	// Not JSON, but YAML: it is converted, then decoded by the typed decoder.
	{"trailing comma", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},}`, true},
	// go-yaml v2 reads the first flow mapping and ignores what follows it.
	{"two values", `{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"}} {}`, true},
	{"comment after JSON", "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"a\"}} # done", true},
	{"another version", `{"apiVersion":"v2","kind":"Service","metadata":{"name":"a"}}`, false},
	{"a List", `{"apiVersion":"v1","kind":"List","items":[]}`, false},
	{"no kind", `{"apiVersion":"v1","metadata":{"name":"a"}}`, false},
	{"kind not a string", `{"apiVersion":"v1","kind":1,"metadata":{"name":"a"}}`, false},
	{"not an object", `["apiVersion","v1"]`, false},
	{"invalid UTF-8", "{\"apiVersion\":\"v1\",\"kind\":\"Service\",\"metadata\":{\"name\":\"a\xff\"}}", false},

	// YAML, converted to JSON first (sigs.k8s.io/yaml), as the loader does.
	{"YAML", "apiVersion: v1\nkind: Service\nmetadata:\n  name: a # the name\nspec:\n  ports:\n  - port: 80\n    targetPort: 8080\n", true},
	{"YAML quoted number", "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec:\n  ports: [{port: 80, targetPort: \"8080\"}]\n", true},
	{"YAML anchors", "apiVersion: v1\nkind: Service\nmetadata: {name: &n a, labels: {app: *n}}\nspec:\n  selector: {app: *n}\n  ports: [&p {port: 80, protocol: TCP}]\n", true},
	{"YAML merge key", "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  labels: &l {app: a}\n  annotations:\n    <<: *l\n    more: x\nspec: {}\n", true},
	{"YAML block strings", "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n  annotations:\n    lit: |\n      one\n      two\n    folded: >-\n      one\n      two\nspec: {}\n", true},
	{"YAML 1.1 booleans", "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s}\naddressType: IPv4\nendpoints:\n- addresses: [10.0.0.1]\n  conditions: {ready: yes, serving: on, terminating: False}\n", true},
	{"YAML nulls", "apiVersion: v1\nkind: Service\nmetadata: {name: a, labels: ~}\nspec:\n  clusterIP: null\n  ports:\n", true},
	{"YAML numeric label value", "apiVersion: v1\nkind: Service\nmetadata: {name: a, labels: {v: 1.0}}\n", false},
	{"YAML quoted port", "apiVersion: v1\nkind: Service\nmetadata: {name: a}\nspec:\n  ports: [{port: \"80\"}]\n", false},
	{"YAML flow document", "{apiVersion: v1, kind: Node, metadata: {name: n1}}", true},
	{"YAML no is false", "{apiVersion: v1, kind: Node, metadata: {name: no}}", false},
}

// checkAgrees decodes doc as the loader does — the typed decoder first, then, unless it took
// the document, YAML converted to JSON, and the typed decoder again — and fails when the typed
// decoder takes a document that universal (after the same conversion) refuses or decodes into a
// different object, or takes as JSON a document that is not JSON. It returns whether the typed
// decoder took the document.
func checkAgrees(t testing.TB, dec *decoder, doc []byte) bool {
	t.Helper()
	js := doc
	got := dec.typed(doc)
	if got != nil && !json.Valid(doc) {
		t.Fatalf("typed decoder took %q, which is not JSON", doc)
	}
	if got == nil && !json.Valid(doc) {
		var err error
		if js, err = yaml.YAMLToJSONStrict(doc); err != nil {
			return false // the loader refuses it before either decoder sees it
		}
		got = dec.typed(js)
	}
	if got == nil {
		return false
	}
	want, _, err := dec.universal.Decode(js, nil, nil)
	if err != nil {
		t.Fatalf("typed decoder took %s, universal refuses it: %v", js, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("typed decoder and universal differ on %s:\ntyped     %#v\nuniversal %#v", js, got, want)
	}
	return true
}

// TestTypedAgreesWithUniversal: what the typed decoder takes, universal takes and decodes into
// the same object; what universal refuses (unknown or duplicated fields, wrong types) the
// typed decoder leaves to it, so the error and its message are universal's.
func TestTypedAgreesWithUniversal(t *testing.T) {
	dec := newDecoder()
	for _, js := range fullObjects(t) {
		if !checkAgrees(t, dec, []byte(js)) {
			t.Errorf("typed decoder refused %s", js)
		}
	}
	for _, c := range decodeCases {
		t.Run(c.name, func(t *testing.T) {
			if took := checkAgrees(t, dec, []byte(c.doc)); took != c.accept {
				t.Fatalf("typed decoder took %q: %v, want %v", c.doc, took, c.accept)
			}
		})
	}
}

// FuzzTypedAgreesWithUniversal: on any document, JSON or YAML, the typed decoder takes only
// what universal takes, and makes the same object of it.
func FuzzTypedAgreesWithUniversal(f *testing.F) {
	for _, js := range fullObjects(f) {
		f.Add(js)
	}
	for _, c := range decodeCases {
		f.Add(c.doc)
	}
	dec := newDecoder()
	f.Fuzz(func(t *testing.T, doc string) {
		checkAgrees(t, dec, []byte(doc))
	})
}
