// Package workload generates deterministic service models for benchmarks: a seeded mix of
// ClusterIP and NodePort Services with a few port-range and all-ports ones, each with the same
// number of endpoints, and seeded changes to them (endpoint churn, new Services). Source feeds
// the model to a proxier.Proxier the way the change tracker does.
package workload

import (
	"fmt"
	"math/rand"
	"net/netip"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// Spec describes a workload. Shares are fractions of Services; the rest are ClusterIP.
type Spec struct {
	Services  int
	Endpoints int // per Service port
	Seed      int64
	// NodePortShare, RangeShare and AllPortsShare: defaults 0.3, 0.01 and 0.005 when all three are 0.
	NodePortShare, RangeShare, AllPortsShare float64
	// TwoPortShare is the fraction of ClusterIP/NodePort Services with a second (UDP) port.
	TwoPortShare float64
}

// DefaultSpec is the mix the benchmarks use: 30% NodePort, 1% UDP port ranges (100 ports),
// 0.5% all-ports, 10% of the others with a second port.
func DefaultSpec(services, endpoints int, seed int64) Spec {
	return Spec{Services: services, Endpoints: endpoints, Seed: seed,
		NodePortShare: 0.3, RangeShare: 0.01, AllPortsShare: 0.005, TwoPortShare: 0.1}
}

// Address plan (198.18.0.0/15 only): the node is 198.18.0.1; replacement endpoints from churn
// come from 198.18.2.0-198.18.15.255; endpoints from 198.18.16.0 upwards (wrapping within
// 198.18.16.0-198.18.255.255, so large workloads share pod addresses between Services, as pods
// backing several Services do); ClusterIPs are 198.19.0.1 upwards (up to 65,000 Services).
var (
	NodeAddr     = netip.MustParseAddr("198.18.0.1")
	churnBase    = netip.MustParseAddr("198.18.2.0")
	podBase      = netip.MustParseAddr("198.18.16.0")
	clusterIPNet = netip.MustParseAddr("198.19.0.0")
)

const (
	podPool   = 240 * 256
	churnPool = 14 * 256
	// NodePorts are handed out in order from FirstNodePort, per protocol: a 30k-Service workload
	// needs a node-port range wider than Kubernetes' default 30000-32767.
	FirstNodePort = 30000
	rangeStart    = 20000
	rangeWidth    = 100
)

func addrAt(base netip.Addr, off int) netip.Addr {
	b := base.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(off)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// Workload is a generated model plus the state needed to change it deterministically.
type Workload struct {
	Spec     Spec
	Node     *model.Node
	Services []*model.Service // in creation order
	rng      *rand.Rand
	nodePort map[model.Protocol]uint16
	churn    int
}

// Generate builds the workload of spec. The same spec always gives the same Services.
func Generate(spec Spec) *Workload {
	if spec.NodePortShare == 0 && spec.RangeShare == 0 && spec.AllPortsShare == 0 {
		spec.NodePortShare, spec.RangeShare, spec.AllPortsShare = 0.3, 0.01, 0.005
	}
	w := &Workload{Spec: spec, rng: rand.New(rand.NewSource(spec.Seed)),
		Node:     &model.Node{Name: "bench-node", Addresses: []netip.Addr{NodeAddr}},
		nodePort: map[model.Protocol]uint16{model.TCP: FirstNodePort, model.UDP: FirstNodePort}}
	for i := 0; i < spec.Services; i++ {
		w.Services = append(w.Services, w.newService(i))
	}
	return w
}

// newService makes Service i; its kind comes from the seeded generator.
func (w *Workload) newService(i int) *model.Service {
	key := model.ServiceKey{Namespace: fmt.Sprintf("ns-%02d", i%50), Name: fmt.Sprintf("svc-%05d", i)}
	cip := addrAt(clusterIPNet, i+1)
	eps := func(port uint16) []model.Endpoint {
		out := make([]model.Endpoint, w.Spec.Endpoints)
		for j := range out {
			out[j] = model.Endpoint{Addr: addrAt(podBase, (i*w.Spec.Endpoints+j)%podPool), Port: port,
				Ready: true, Serving: true}.At(fmt.Sprintf("node-%d", j%20), "")
		}
		return out
	}
	port := func(name string, proto model.Protocol) model.ServicePort {
		return model.ServicePort{Name: model.PortName{Service: key, Port: name, Protocol: proto}, ClusterIPs: []netip.Addr{cip}}
	}
	s := &model.Service{Key: key}
	r := w.rng.Float64()
	switch sp := w.Spec; {
	case r < sp.AllPortsShare:
		p := port("any", model.TCP)
		p.AllPorts, p.Endpoints = true, eps(0)
		s.Ports = append(s.Ports, p)
	case r < sp.AllPortsShare+sp.RangeShare:
		p := port("rtp", model.UDP)
		p.Port, p.PortEnd, p.Endpoints = rangeStart, rangeStart+rangeWidth-1, eps(0)
		s.Ports = append(s.Ports, p)
	default:
		nodePort := r < sp.AllPortsShare+sp.RangeShare+sp.NodePortShare
		second := w.rng.Float64() < sp.TwoPortShare
		p := port("http", model.TCP)
		p.Port, p.PortEnd, p.TargetPort, p.Endpoints = 80, 80, 8080, eps(8080)
		s.Ports = append(s.Ports, p)
		if second {
			q := port("dns", model.UDP)
			q.Port, q.PortEnd, q.TargetPort, q.Endpoints = 53, 53, 5353, eps(5353)
			s.Ports = append(s.Ports, q)
		}
		if nodePort {
			for k := range s.Ports {
				np := w.nodePort[s.Ports[k].Name.Protocol]
				w.nodePort[s.Ports[k].Name.Protocol] = np + 1
				s.Ports[k].NodePort, s.Ports[k].NodePortEnd = np, np
			}
		}
	}
	return s
}

// ChangeEndpoints replaces one endpoint address in each of n distinct Services chosen by the
// seeded generator (the endpoint count stays the same) and returns the changed Services. The
// Services are new values; those handed out before are not modified.
func (w *Workload) ChangeEndpoints(n int) []*model.Service {
	if n > len(w.Services) {
		n = len(w.Services)
	}
	var out []*model.Service
	for _, i := range w.rng.Perm(len(w.Services))[:n] {
		old := w.Services[i]
		s := &model.Service{Key: old.Key, Ports: append([]model.ServicePort(nil), old.Ports...)}
		addr := addrAt(churnBase, w.churn%churnPool)
		w.churn++
		j := w.rng.Intn(w.Spec.Endpoints)
		for k := range s.Ports {
			eps := append([]model.Endpoint(nil), s.Ports[k].Endpoints...)
			if j < len(eps) {
				eps[j].Addr = addr
			}
			s.Ports[k].Endpoints = eps
		}
		w.Services[i] = s
		out = append(out, s)
	}
	return out
}

// AddService appends one new Service (its kind drawn like the others) and returns it.
func (w *Workload) AddService() *model.Service {
	s := w.newService(len(w.Services))
	w.Services = append(w.Services, s)
	return s
}

// Reseed restarts the generator that picks changes (and new Services' kinds) from seed, so
// repeated runs over the same workload can change different Services.
func (w *Workload) Reseed(seed int64) { w.rng = rand.New(rand.NewSource(seed)) }
