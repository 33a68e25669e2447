package report

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/bench/probe"
	"github.com/nftproxy/nftproxy/bench/syncs"
	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// RangeCost is what adding one Service costs: a single port, or a 16,384-port range.
type RangeCost struct {
	Kind        string
	Sync        []time.Duration // the partial sync that adds it
	Kernel      []time.Duration // its kernel commit
	Ops, Bytes  int
	FirstPacket probe.Latencies
}

// rangeWidth is the range Service's width (DESIGN's RTP example).
const rangeWidth = 16384

// MeasureRanges programs `services` workload Services with nftproxy in a probe topology, then adds
// a single-port Service and a 16,384-port range Service (ports 1024-17407, which hold the
// backend's port) runs times each, removing it between runs, and times first packets to each.
func MeasureRanges(ctx context.Context, services, runs, connects int) ([]RangeCost, error) {
	topo, err := probe.New()
	if err != nil {
		return nil, err
	}
	defer topo.Close()
	w := workload.Generate(workload.DefaultSpec(services, 10, 1))
	src := workload.NewSource(w.Node, w.Services)
	k, err := nft.NewKernel(nft.WithNetNS(topo.Node.Fd()))
	if err != nil {
		return nil, err
	}
	defer k.Close()
	b, err := syncs.NewBuilder()
	if err != nil {
		return nil, err
	}
	p := proxier.New(src, k, []*ruleset.Builder{b}, nil, logr.Discard(), time.Now)
	if _, err := p.Sync(ctx, false); err != nil {
		return nil, err
	}
	vip := netip.MustParseAddr("198.19.252.1")
	key := model.ServiceKey{Namespace: "bench-range", Name: "rtp"}
	single := model.ServicePort{Name: model.PortName{Service: key, Port: "p", Protocol: model.TCP}, ClusterIPs: []netip.Addr{vip},
		Port: probe.ServerPort, PortEnd: probe.ServerPort, TargetPort: probe.ServerPort,
		Endpoints: []model.Endpoint{model.Endpoint{Addr: netip.MustParseAddr("198.18.15.5"), Port: probe.ServerPort, Ready: true, Serving: true}.At("n", "")}}
	wide := single
	wide.Port, wide.PortEnd, wide.TargetPort = 1024, 1024+rangeWidth-1, 0
	wide.Endpoints = []model.Endpoint{model.Endpoint{Addr: netip.MustParseAddr("198.18.15.5"), Ready: true, Serving: true}.At("n", "")}
	var out []RangeCost
	for _, c := range []struct {
		kind string
		sp   model.ServicePort
	}{{"single port", single}, {fmt.Sprintf("%d-port range", rangeWidth), wide}} {
		rc := RangeCost{Kind: c.kind}
		for r := 0; r < runs; r++ {
			src.Put(&model.Service{Key: key, Ports: []model.ServicePort{c.sp}})
			start := time.Now()
			st, err := p.Sync(ctx, false)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.kind, err)
			}
			rc.Sync = append(rc.Sync, time.Since(start))
			rc.Kernel = append(rc.Kernel, st.Stats.Duration)
			rc.Ops, rc.Bytes = st.Ops, st.Stats.Bytes
			if r == runs-1 {
				if rc.FirstPacket, err = topo.Connect([]netip.AddrPort{netip.AddrPortFrom(vip, probe.ServerPort)}, connects, time.Second); err != nil {
					return nil, err
				}
			}
			src.Put(&model.Service{Key: key}) // no ports: removed
			if _, err := p.Sync(ctx, false); err != nil {
				return nil, err
			}
		}
		out = append(out, rc)
	}
	return out, nil
}
