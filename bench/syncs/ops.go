package syncs

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/proxier"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// ServiceShape is one kind of Service whose ops ServiceOps counts.
type ServiceShape struct {
	Name string
	// Endpoints per port; NodePort and LoadBalancer add a node port, and a LoadBalancer IP.
	Endpoints              int
	NodePort, LoadBalancer bool
}

// ServiceShapes are the shapes the report counts.
var ServiceShapes = []ServiceShape{
	{Name: "ClusterIP, 1 endpoint", Endpoints: 1},
	{Name: "ClusterIP, 10 endpoints", Endpoints: 10},
	{Name: "NodePort, 10 endpoints", Endpoints: 10, NodePort: true},
	{Name: "LoadBalancer (1 IP, node port), 10 endpoints", Endpoints: 10, NodePort: true, LoadBalancer: true},
}

// ServiceOpsRow is what one Service of a shape costs in operations.
type ServiceOpsRow struct {
	Shape ServiceShape
	// Add is the ops of the partial sync that adds n such Services to the workload (each with
	// its own addresses and node port), divided by n; First is the first one's alone (it may
	// create its shard's shared chains of its endpoint count).
	Add   float64
	First int
}

// ServiceOps counts, with the in-memory kernel (ops do not depend on the kernel), the operations
// one Service of each shape costs once base workload Services are programmed: n Services of the
// shape in one partial sync, and the first one alone. It also returns the full sync's ops per
// Service of the workload.
func ServiceOps(ctx context.Context, base, n int) (rows []ServiceOpsRow, fullPerService float64, err error) {
	w := workload.Generate(workload.DefaultSpec(base, 10, 1))
	b, err := NewBuilder()
	if err != nil {
		return nil, 0, err
	}
	src := workload.NewSource(w.Node, w.Services)
	p := proxier.New(src, nft.NewFake(), []*ruleset.Builder{b}, nil, logr.Discard(), time.Now)
	res, err := p.Sync(ctx, false)
	if err != nil {
		return nil, 0, fmt.Errorf("full sync of %d Services: %w", base, err)
	}
	fullPerService = float64(res.Ops) / float64(base)
	next := 0
	for _, sh := range ServiceShapes {
		mk := func() *model.Service {
			next++
			return shapeService(sh, next)
		}
		src.Put(mk())
		first, err := p.Sync(ctx, false)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", sh.Name, err)
		}
		var batch []*model.Service
		for range n {
			batch = append(batch, mk())
		}
		src.Put(batch...)
		res, err := p.Sync(ctx, false)
		if err != nil {
			return nil, 0, fmt.Errorf("%d × %s: %w", n, sh.Name, err)
		}
		rows = append(rows, ServiceOpsRow{Shape: sh, First: first.Ops, Add: float64(res.Ops) / float64(n)})
	}
	return rows, fullPerService, nil
}

// shapeService is Service i of shape sh, with addresses and a node port no workload Service uses
// (198.19.200.0/21 for ClusterIPs and LoadBalancer IPs, pods from 198.18.200.0, node port 62000+i).
func shapeService(sh ServiceShape, i int) *model.Service {
	key := model.ServiceKey{Namespace: "ops", Name: fmt.Sprintf("shape-%d", i)}
	at := func(a string, off int) netip.Addr {
		b := netip.MustParseAddr(a).As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + uint32(off)
		return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	}
	sp := model.ServicePort{Name: model.PortName{Service: key, Port: "http", Protocol: model.TCP}, Port: 80, PortEnd: 80, TargetPort: 8080,
		ClusterIPs: []netip.Addr{at("198.19.200.0", 2*i)}}
	for j := range sh.Endpoints {
		sp.Endpoints = append(sp.Endpoints, model.Endpoint{Addr: at("198.18.200.0", i*sh.Endpoints+j), Port: 8080, Ready: true, Serving: true}.At("node-1", ""))
	}
	if sh.NodePort {
		sp.NodePort, sp.NodePortEnd = uint16(62000+i), uint16(62000+i)
	}
	if sh.LoadBalancer {
		sp.LoadBalancerIPs = []netip.Addr{at("198.19.200.0", 2*i+1)}
	}
	return &model.Service{Key: key, Ports: []model.ServicePort{sp}}
}

// OpsMarkdown writes ServiceOps' table.
func OpsMarkdown(w io.Writer, base, n int, rows []ServiceOpsRow, fullPerService float64) {
	fmt.Fprintf(w, "\n**Operations per Service** (in-memory kernel, after %d workload Services; full sync: %.1f ops per Service)\n\n", base, fullPerService)
	fmt.Fprintf(w, "| Service | ops to add one (mean of %d in one sync) | the first alone |\n|---|---:|---:|\n", n)
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.1f | %d |\n", r.Shape.Name, r.Add, r.First)
	}
}
