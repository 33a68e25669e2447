package node

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

// The backends' namespace and the LoadBalancer addresses the test publishes in Service status
// (as a load-balancer controller would), from test/lab's LoadBalancer range.
const (
	appNS     = "demo"
	lbWeb     = "198.19.100.1"
	lbLocal   = "198.19.100.2"
	lbSteady  = "198.19.100.3"
	webPorts  = "8080,9000-9004,7000-7002"
	probesPer = 6
)

// deployment is a Deployment of the echo backend on one node: replicas pods labelled
// app=name, each answering on ports with its own name; a rollout surges one new pod before
// taking an old one away, so some pod is always Ready.
func deployment(name, node string, replicas int32, tag, ports string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	zero, one := intstr.FromInt32(0), intstr.FromInt32(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &one}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{NodeSelector: map[string]string{"kubernetes.io/hostname": node}, Containers: []corev1.Container{{
					Name:            "echo",
					Image:           EchoImage + ":" + tag,
					ImagePullPolicy: corev1.PullIfNotPresent,
					Args:            []string{"-ports", ports},
					Env: []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{
						FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
					ReadinessProbe: &corev1.Probe{
						ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}},
						PeriodSeconds: 1,
					},
				}}},
			},
		},
	}
}

// service is a Service selecting app=app with the given ports and annotations.
func service(name, app string, typ corev1.ServiceType, ports []corev1.ServicePort, annotations map[string]string) *corev1.Service {
	single := corev1.IPFamilyPolicySingleStack
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: appNS, Name: name, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Type:           typ,
			IPFamilyPolicy: &single,
			Selector:       map[string]string{"app": app},
			Ports:          ports,
		},
	}
}

func port(name string, proto corev1.Protocol, port, target int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Protocol: proto, Port: port, TargetPort: intstr.FromInt32(target)}
}

// httpAndUDP is port 80 on TCP and UDP, to the backends' 8080.
func httpAndUDP() []corev1.ServicePort {
	return []corev1.ServicePort{port("tcp", corev1.ProtocolTCP, 80, 8080), port("udp", corev1.ProtocolUDP, 80, 8080)}
}

// createBackends creates the Deployments and the Services, publishes the LoadBalancer
// addresses, and waits for the EndpointSlice controller to list every backend Ready.
func (e *env) createBackends(ctx context.Context, t *testing.T) {
	e.ensureNamespace(ctx, appNS)
	for _, d := range []*appsv1.Deployment{
		// The backends on the first node; the client pod on the last, so that with two nodes
		// its traffic crosses to the other node and the second node has no local endpoint.
		deployment("web", e.node.Name, 2, "1", webPorts),
		deployment("steady", e.node.Name, 1, "1", "8080"),
		deployment("client", e.nodes[len(e.nodes)-1].Name, 1, "1", "8080"),
	} {
		if _, err := e.cs.AppsV1().Deployments(appNS).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	local := service("web-local", "web", corev1.ServiceTypeLoadBalancer, httpAndUDP()[:1], nil)
	local.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	all := service("web-all", "web", corev1.ServiceTypeClusterIP, []corev1.ServicePort{
		port("tcp", corev1.ProtocolTCP, 7000, 7000), port("udp", corev1.ProtocolUDP, 7000, 7000)},
		map[string]string{"nftproxy.io/all-ports": "true"})
	for _, s := range []*corev1.Service{
		service("web", "web", corev1.ServiceTypeClusterIP, httpAndUDP(), nil),
		service("web-np", "web", corev1.ServiceTypeNodePort, httpAndUDP(), nil),
		service("web-lb", "web", corev1.ServiceTypeLoadBalancer, httpAndUDP(), nil),
		local,
		service("web-range", "web", corev1.ServiceTypeClusterIP, []corev1.ServicePort{
			{Name: "rng", Protocol: corev1.ProtocolTCP, Port: 9000}, {Name: "rngu", Protocol: corev1.ProtocolUDP, Port: 9000}},
			map[string]string{"nftproxy.io/port-ranges": "rng=9000-9004,rngu=9000-9004"}),
		all,
		service("steady", "steady", corev1.ServiceTypeLoadBalancer, httpAndUDP(), nil),
	} {
		if _, err := e.cs.CoreV1().Services(appNS).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("Service %s: %v", s.Name, err)
		}
	}
	for name, ip := range map[string]string{"web-lb": lbWeb, "web-local": lbLocal, "steady": lbSteady} {
		s, err := e.cs.CoreV1().Services(appNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: ip}}
		if _, err := e.cs.CoreV1().Services(appNS).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("Service %s status: %v", name, err)
		}
	}
	for svc, want := range map[string]int{"web": 2, "web-all": 2, "web-range": 2, "steady": 1} {
		e.waitFor(ctx, fmt.Sprintf("%d ready endpoints of %s", want, svc), func() (bool, string) {
			eps, err := e.endpoints(ctx, svc)
			if err != nil {
				return false, err.Error()
			}
			return len(eps) == want, fmt.Sprint(eps)
		})
	}
}

// endpoints maps the pod names of a Service's ready endpoints, from the EndpointSlices the
// controller wrote, to their addresses.
func (e *env) endpoints(ctx context.Context, svc string) (map[string]string, error) {
	slices, err := e.cs.DiscoveryV1().EndpointSlices(appNS).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + svc})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range slices.Items {
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" || len(ep.Addresses) == 0 ||
				ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
				continue
			}
			out[ep.TargetRef.Name] = ep.Addresses[0]
		}
	}
	return out, nil
}

// podNS enters the network namespace of the first pod labelled app=app, through its
// container's process.
func (e *env) podNS(ctx context.Context, t *testing.T, app string) *netns.NS {
	pods, err := e.cs.CoreV1().Pods(appNS).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" || !podReady(&p) {
			continue
		}
		var node *Node
		for _, n := range e.nodes {
			if n.Name == p.Spec.NodeName {
				node = n
			}
		}
		if node == nil {
			t.Fatalf("pod %s on %q, not one of the tier's nodes", p.Name, p.Spec.NodeName)
		}
		pid, err := node.PodPID(p.Status.ContainerStatuses[0].ContainerID)
		if err != nil {
			t.Fatal(err)
		}
		ns, err := netns.Open("pod-"+p.Name, "/proc/"+strconv.Itoa(pid)+"/ns/net")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		return ns
	}
	t.Fatalf("no ready pod app=%s", app)
	return nil
}

// serviceAddrs returns a Service's ClusterIP and its node ports by port name.
func (e *env) serviceAddrs(ctx context.Context, t *testing.T, name string) (string, map[string]int32) {
	s, err := e.cs.CoreV1().Services(appNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np := map[string]int32{}
	for _, p := range s.Spec.Ports {
		np[p.Name] = p.NodePort
	}
	return s.Spec.ClusterIP, np
}

// probe is one kind of connection the tier makes and what its answers must show.
type probe struct {
	from     string // "node", "client", "pod"
	proto    string
	addr     string
	svc      string // whose endpoints may answer
	port     uint16 // the port the backend must see
	clientIP bool   // the backend must see the client's own address (no masquerade)
	// seenFrom, when set, is the address the backend must see (a masquerading node's).
	seenFrom string
	// none: nothing may answer (externalTrafficPolicy Local on a node without an endpoint).
	none bool
}

// services creates the backends and Services and probes each from a pod, the node and the
// client: every answer must come from a ready endpoint of that Service as the API lists it,
// on the right port, and eTP=Local keeps the client's address.
func (e *env) services(ctx context.Context, t *testing.T) {
	created := time.Now()
	e.createBackends(ctx, t)
	e.figures.set("Services created -> endpoints Ready", time.Since(created))
	cip, _ := e.serviceAddrs(ctx, t, "web")
	_, np := e.serviceAddrs(ctx, t, "web-np")
	_, lnp := e.serviceAddrs(ctx, t, "web-local")
	rcip, _ := e.serviceAddrs(ctx, t, "web-range")
	acip, _ := e.serviceAddrs(ctx, t, "web-all")
	hp := func(ip string, p int32) string {
		return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(p)).String()
	}
	node1 := NodeIP(1)
	probes := []probe{
		{"pod", "tcp", hp(cip, 80), "web", 8080, false, "", false},
		{"pod", "udp", hp(cip, 80), "web", 8080, false, "", false},
		{"pod", "tcp", hp(rcip, 9003), "web-range", 9003, false, "", false},
		{"pod", "udp", hp(acip, 7002), "web-all", 7002, false, "", false},
		{"pod", "tcp", hp(lbWeb, 80), "web", 8080, false, "", false},
		{"node", "tcp", hp(cip, 80), "web", 8080, false, "", false},
		{"node", "udp", hp(cip, 80), "web", 8080, false, "", false},
		{"node", "tcp", hp(node1, np["tcp"]), "web", 8080, false, "", false},
		{"node", "udp", hp(rcip, 9001), "web-range", 9001, false, "", false},
		{"node", "tcp", hp(acip, 7001), "web-all", 7001, false, "", false},
		{"client", "tcp", hp(lbWeb, 80), "web", 8080, false, "", false},
		{"client", "udp", hp(lbWeb, 80), "web", 8080, false, "", false},
		{"client", "tcp", hp(node1, np["tcp"]), "web", 8080, false, "", false},
		{"client", "udp", hp(node1, np["udp"]), "web", 8080, false, "", false},
		{"client", "tcp", hp(cip, 80), "web", 8080, false, "", false},
		{"client", "tcp", hp(lbLocal, 80), "web", 8080, true, "", false},
		{"client", "tcp", hp(node1, lnp["tcp"]), "web", 8080, true, "", false},
	}
	if len(e.nodes) > 1 {
		// The second node has no backend: a NodePort there crosses to the first node,
		// masqueraded to the second node's address so the answer comes back through it;
		// eTP=Local there has no local endpoint and drops.
		node2 := NodeIP(2)
		probes = append(probes,
			probe{"client", "tcp", hp(node2, np["tcp"]), "web", 8080, false, node2, false},
			probe{"client", "udp", hp(node2, np["udp"]), "web", 8080, false, node2, false},
			probe{"client", "tcp", hp(node2, lnp["tcp"]), "web", 8080, false, "", true},
		)
	}
	from := map[string]*netns.NS{"node": e.node.NS, "client": e.node.Client, "pod": e.podNS(ctx, t, "client")}
	d := lab.Dialer{Timeout: 2 * time.Second, UDPAttempts: 1}
	// The first probe of each kind may wait for the daemon's sync of the new Services.
	programmed := time.Now()
	for _, p := range probes {
		if p.none {
			continue
		}
		e.waitFor(ctx, fmt.Sprintf("%s %s %s to answer", p.from, p.proto, p.addr), func() (bool, string) {
			r := d.Dial(ctx, from[p.from], p.proto, p.addr)
			return r.Outcome == lab.Replied, r.String()
		})
	}
	e.figures.set("endpoints Ready -> every probe answered", time.Since(programmed))
	for _, p := range probes {
		eps, err := e.endpoints(ctx, p.svc)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		n := probesPer
		if p.none {
			n = 2 // each waits for the dial timeout
		}
		for range n {
			r := d.Dial(ctx, from[p.from], p.proto, p.addr)
			if err := check(r, p, eps); err != nil {
				t.Errorf("%s %s %s: %v", p.from, p.proto, p.addr, err)
				continue
			}
			if p.none {
				seen[r.Outcome.String()]++
			} else {
				seen[r.Reply.Pod]++
			}
		}
		t.Logf("%-6s %s %-21s -> %v", p.from, p.proto, p.addr, seen)
	}
}

// check says what is wrong with an answer: no answer, a pod that is not a ready endpoint of
// the Service, another address than the API's for that pod, the wrong port, or a masqueraded
// client where the policy keeps its address.
func check(r lab.Result, p probe, eps map[string]string) error {
	if p.none {
		if r.Outcome == lab.Replied {
			return fmt.Errorf("answered by %s; want no answer (no local endpoint)", r.Reply.Pod)
		}
		return nil
	}
	if r.Outcome != lab.Replied {
		return fmt.Errorf("no answer: %s", r)
	}
	ip, ok := eps[r.Reply.Pod]
	if !ok {
		return fmt.Errorf("answered by %s, not a ready endpoint of %s (%v)", r.Reply.Pod, p.svc, eps)
	}
	if r.Reply.To.String() != ip {
		return fmt.Errorf("pod %s answered on %s, the API says its address is %s", r.Reply.Pod, r.Reply.To, ip)
	}
	if r.Reply.Port != p.port {
		return fmt.Errorf("pod %s answered on port %d, want %d", r.Reply.Pod, r.Reply.Port, p.port)
	}
	if p.clientIP && r.Reply.From.Addr().String() != ClientIP {
		return fmt.Errorf("pod %s saw %s, want the client's own %s (externalTrafficPolicy Local)", r.Reply.Pod, r.Reply.From, ClientIP)
	}
	if p.seenFrom != "" && r.Reply.From.Addr().String() != p.seenFrom {
		return fmt.Errorf("pod %s saw %s, want the masquerading node's %s", r.Reply.Pod, r.Reply.From, p.seenFrom)
	}
	return nil
}
