package property

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// Options shape one generated batch.
type Options struct {
	// Seed makes the batch: the same seed and options give the same objects, byte for byte.
	Seed uint64
	// Services is how many Services the batch holds.
	Services int
	// MaxEndpoints bounds the "many endpoints" draw of one Service (default 40).
	MaxEndpoints int
	// Exclude keeps shapes out of the batch (to narrow a failure down to one shape).
	Exclude map[Shape]bool
	// NodeName and NodeIPs describe the node the proxy runs on; the node-address shapes use
	// NodeIPs as LoadBalancer ingress and external IPs.
	NodeName string
	NodeIPs  []netip.Addr
	// ReservedClusterIPs are never given to a generated Service (the canary's).
	ReservedClusterIPs []netip.Addr
	// LocalIPs are addresses the node's kernel holds that its Node object does not list (a pod
	// bridge's gateway); ShapeKernelAddress puts cluster IPs there, one Service per address.
	LocalIPs []netip.Addr
}

// Generated is one Service with its EndpointSlices, the shapes it carries and what the property
// requires of it.
type Generated struct {
	Service *corev1.Service
	Slices  []*discoveryv1.EndpointSlice
	Shapes  shapeSet
	Expect  Expect
	// Serving lists the ports (model port name and protocol) that have a ready endpoint on this
	// node, per IP family ("4" or "6"): traffic to them must reach an endpoint chain, never the
	// no-endpoint reject.
	Serving []ServingPort

	nodeName string // the node Serving was computed for
}

// ServingPort is one port that must have an endpoint chain in one family.
type ServingPort struct {
	Name   model.PortName
	Family string
}

// Key is the Service's model key.
func (g *Generated) Key() model.ServiceKey {
	return model.ServiceKey{Namespace: g.Service.Namespace, Name: g.Service.Name}
}

// Batch is one generated set of Services for one node.
type Batch struct {
	Seed     uint64
	Node     *corev1.Node
	Services []*Generated
	// LocalIPs are the node's kernel-held addresses the Node does not list (Options.LocalIPs):
	// the model must know them as the daemon does (model.Tracker.SetLocalAddresses).
	LocalIPs []netip.Addr
}

// Reserved ports no Service may capture or reject on a node address (the minimum: SSH,
// etcd, the API server, the kubelet, nftproxy's metrics and health ports).
var ReservedPorts = []uint16{22, 2379, 2380, 6443, 10249, 10250, 10256}

// Node ports come from the API server's default service-node-port-range.
const (
	nodePortFirst = 30000
	nodePortLast  = 32767
	// blockFirst starts the identity node-port blocks of ShapeNodePortBlock.
	blockFirst = 16000
	blockLast  = 16999
)

// gen holds the state of one batch's generation: the random source and every pool that must
// hand out unique values (names, addresses, node ports).
type gen struct {
	opts      Options
	r         *rand.Rand
	names     map[string]bool // ns/name taken
	nsPool    []string
	cip4      uint32 // next offset in the v4 service CIDR
	cip6      uint32
	lb, ext   uint32
	ep        uint32
	nodePorts []uint16 // shuffled free node ports
	block     uint16   // next free identity block port
	reserved  map[netip.Addr]bool
	// clashable are node ports of earlier Services expected to be programmed.
	clashable []clashPort
	created   time.Time
	// usedSpecial and usedLocal are the special and kernel-held addresses already given as
	// cluster IPs (each at most once a batch).
	usedSpecial map[string]bool
	usedLocal   map[netip.Addr]bool
}

type clashPort struct {
	proto corev1.Protocol
	port  int32
	owner string // ns/name of the older Service
}

// Generate builds a batch. It panics when a generated object fails the API's own validation:
// that is a bug of the generator, and the test input must be exactly what the API accepts.
func Generate(opts Options) *Batch {
	if opts.MaxEndpoints == 0 {
		opts.MaxEndpoints = 40
	}
	g := &gen{opts: opts, r: rand.New(rand.NewPCG(opts.Seed, 0x6e667470726f7879)), names: map[string]bool{},
		reserved: map[netip.Addr]bool{}, block: blockFirst, created: time.Unix(1700000000, 0),
		usedSpecial: map[string]bool{}, usedLocal: map[netip.Addr]bool{}}
	for _, a := range opts.ReservedClusterIPs {
		g.reserved[a] = true
	}
	for p := nodePortFirst; p <= nodePortLast; p++ {
		g.nodePorts = append(g.nodePorts, uint16(p))
	}
	g.r.Shuffle(len(g.nodePorts), func(i, j int) { g.nodePorts[i], g.nodePorts[j] = g.nodePorts[j], g.nodePorts[i] })
	g.cip4, g.cip6 = 1+uint32(g.r.IntN(64)), 1+uint32(g.r.IntN(64))
	nsCount := 1 + opts.Services/5
	for i := 0; i < nsCount; i++ {
		g.nsPool = append(g.nsPool, g.namespaceName())
	}
	b := &Batch{Seed: opts.Seed, Node: g.node(), LocalIPs: opts.LocalIPs}
	for i := 0; i < opts.Services; i++ {
		gs := g.service(i)
		if err := validateGenerated(gs); err != nil {
			panic(fmt.Sprintf("property generator (seed %d) made an object the API server refuses: %v", opts.Seed, err))
		}
		b.Services = append(b.Services, gs)
	}
	if err := validateBatch(b, opts.ReservedClusterIPs); err != nil {
		panic(fmt.Sprintf("property generator (seed %d) made a batch the API server's allocators cannot: %v", opts.Seed, err))
	}
	return b
}

func (g *gen) allowed(s Shape) bool { return !g.opts.Exclude[s] }

// chance is true with probability p.
func (g *gen) chance(p float64) bool { return g.r.Float64() < p }

func (g *gen) node() *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: g.opts.NodeName,
		Labels: map[string]string{"topology.kubernetes.io/zone": "zone-a", "kubernetes.io/hostname": g.opts.NodeName}}}
	for _, a := range g.opts.NodeIPs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
	}
	return n
}

// nodeIP returns the node's first address of the family (4 or 6), if any.
func (g *gen) nodeIP(v6 bool) (netip.Addr, bool) {
	for _, a := range g.opts.NodeIPs {
		if a.Is6() == v6 {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// service draws one Service: its primary trait first, then everything else at random among the
// values that keep the trait's expected outcome.
func (g *gen) service(i int) *Generated {
	gs := &Generated{Shapes: shapeSet{}, Expect: Expect{Outcome: Programmed}, nodeName: g.opts.NodeName}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{
		CreationTimestamp: metav1.NewTime(g.created.Add(time.Duration(i) * time.Second)),
		Labels:            map[string]string{"app.kubernetes.io/name": g.labelValue()},
		Annotations:       map[string]string{"example.com/owner": g.annotationValue()},
	}}
	gs.Service = svc
	long := g.allowed(ShapeLongNames) && g.chance(0.3)
	if long {
		gs.Shapes[ShapeLongNames] = true
	}
	svc.Namespace, svc.Name = g.serviceName(long)

	primary := g.primary()
	switch primary {
	case ShapeIgnored:
		g.ignored(gs)
		return gs
	case ShapeNodeAddressAllPorts, ShapeNodeAddressRange, ShapeNodeAddressReservedPort, ShapeNodeAddressPort:
		g.nodeAddressService(gs, primary, long)
	case ShapeAllPorts:
		g.allPortsService(gs, long)
	case ShapeNodePortClash:
		if !g.clashService(gs, long) {
			g.plainService(gs, long, "")
		}
	case ShapeNodePortBlock, ShapeNodePortBlockReserved:
		g.blockService(gs, primary, long)
	case ShapeSpecialAddress:
		if !g.specialAddressService(gs, long) {
			g.plainService(gs, long, "")
		}
	case ShapeKernelAddress:
		if !g.kernelAddressService(gs, long) {
			g.plainService(gs, long, "")
		}
	default:
		g.plainService(gs, long, primary)
	}
	g.endpoints(gs)
	return gs
}

// primary picks the trait a Service is built around; most Services are plain ones with random
// details (ranges, policies, affinity, addresses).
func (g *gen) primary() Shape {
	weighted := []struct {
		s Shape
		w int
	}{
		{"", 40}, {ShapeManyPorts, 4}, {ShapeRange, 8}, {ShapeOnePortRange, 5}, {ShapeRangeTo65535, 4},
		{ShapeAllPorts, 6}, {ShapeNodePortClash, 3}, {ShapeNodePortBlock, 3}, {ShapeNodePortBlockReserved, 2},
		{ShapeNodeAddressPort, 3}, {ShapeNodeAddressReservedPort, 2}, {ShapeNodeAddressAllPorts, 2},
		{ShapeNodeAddressRange, 2}, {ShapeSourceRangeSpaces, 3}, {ShapeIgnored, 2},
		{ShapeSpecialAddress, 2}, {ShapeKernelAddress, 2},
	}
	total := 0
	for _, w := range weighted {
		if w.s == "" || g.allowed(w.s) {
			total += w.w
		}
	}
	n := g.r.IntN(total)
	for _, w := range weighted {
		if w.s != "" && !g.allowed(w.s) {
			continue
		}
		if n < w.w {
			return w.s
		}
		n -= w.w
	}
	return ""
}

func (g *gen) ignored(gs *Generated) {
	gs.Shapes[ShapeIgnored] = true
	gs.Expect = Expect{Outcome: Ignored, Why: "headless or ExternalName"}
	svc := gs.Service
	if g.chance(0.5) {
		svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "backend.example.com",
			SessionAffinity: corev1.ServiceAffinityNone}
		return
	}
	svc.Spec = corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: corev1.ClusterIPNone,
		ClusterIPs: []string{corev1.ClusterIPNone}, SessionAffinity: corev1.ServiceAffinityNone}
	g.families(svc, false)
	svc.Spec.ClusterIPs = []string{corev1.ClusterIPNone}
	svc.Spec.ClusterIP = corev1.ClusterIPNone
	svc.Spec.Ports = []corev1.ServicePort{g.singlePort(map[string]bool{}, portUse{}, portOpts{})}
	g.endpoints(gs)
}

// plainService is a ClusterIP, NodePort or LoadBalancer Service with random ports and details;
// primary adds its trait (many ports, a range shape, spaced source ranges).
func (g *gen) plainService(gs *Generated, long bool, primary Shape) {
	svc := gs.Service
	svc.Spec.Type = []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer}[g.r.IntN(3)]
	if primary == ShapeSourceRangeSpaces {
		svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	}
	g.families(svc, true)
	n := 1
	switch {
	case primary == ShapeManyPorts:
		n = 20 + g.r.IntN(81)
		gs.Shapes[ShapeManyPorts] = true
	case g.chance(0.4):
		n = 2 + g.r.IntN(5)
	}
	use := portUse{}
	names := map[string]bool{}
	for k := 0; k < n; k++ {
		svc.Spec.Ports = append(svc.Spec.Ports, g.singlePort(names, use, portOpts{named: n > 1, long: long}))
	}
	switch primary {
	case ShapeRange, ShapeOnePortRange, ShapeRangeTo65535:
		g.makeRange(gs, use, primary, long)
	case "":
		if g.chance(0.15) && g.allowed(ShapeRange) {
			g.makeRange(gs, use, ShapeRange, long)
		}
	}
	g.nodePortsFor(gs)
	g.external(gs, primary == ShapeSourceRangeSpaces)
	g.policies(gs)
	g.registerClashable(gs)
}
