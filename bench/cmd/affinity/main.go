// Command affinity measures what sessionAffinity ClientIP costs a full sync against the real
// kernel, in fresh network namespaces: one Service with many ports and endpoints (the shape of
// the issue: 250 TCP ports × 100 endpoints, timeoutSeconds 86400), and the benchmark workload
// with every Service port sticky against the same workload without affinity, alternating in
// one run. It drives the builder and the reconciler as the daemon does (one transaction) and
// prints, per case, the sync's wall time, the kernel's time for the batch (from the first byte
// sent to the answer) and the process's system CPU time. Needs root. See bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/reconciler"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/netns"
)

func main() {
	ports := flag.Int("ports", 250, "ports of the wide Service (TCP, from 1000)")
	wideEps := flag.Int("wide-endpoints", 100, "endpoints of the wide Service")
	services := flag.Int("services", 10000, "Services of the workload case (0: skip it)")
	endpoints := flag.Int("endpoints", 10, "endpoints per Service port of the workload case")
	runs := flag.Int("runs", 3, "runs per case")
	skipWide := flag.Bool("skip-wide", false, "skip the wide Service")
	flag.Parse()
	ctx := context.Background()
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
	if err != nil {
		log.Fatal(err)
	}
	for r := 0; r < *runs; r++ {
		if !*skipWide {
			node, svcs := wide(*ports, *wideEps)
			report(fmt.Sprintf("wide %d ports x %d endpoints, affinity", *ports, *wideEps), r, b, node, svcs)
		}
		if *services > 0 {
			w := workload.Generate(workload.DefaultSpec(*services, *endpoints, 1))
			report(fmt.Sprintf("%dx%d without affinity", *services, *endpoints), r, b, w.Node, w.Services)
			report(fmt.Sprintf("%dx%d all with affinity", *services, *endpoints), r, b, w.Node, sticky(w.Services))
		}
	}
	_ = ctx
}

const day = 24 * time.Hour

// wide is one ClusterIP Service with ports 1000.. and n endpoints on each, ClientIP affinity.
func wide(ports, n int) (*model.Node, []*model.Service) {
	key := model.ServiceKey{Namespace: "bench", Name: "wide"}
	svc := &model.Service{Key: key}
	for p := 0; p < ports; p++ {
		port := uint16(1000 + p)
		sp := model.ServicePort{Name: model.PortName{Service: key, Port: fmt.Sprintf("p%d", port), Protocol: model.TCP},
			Port: port, PortEnd: port, TargetPort: port, ClusterIPs: []netip.Addr{netip.MustParseAddr("198.19.0.10")},
			AffinityTimeout: day}
		for e := 0; e < n; e++ {
			sp.Endpoints = append(sp.Endpoints, model.Endpoint{Addr: netip.AddrFrom4([4]byte{198, 18, 16 + byte(e/250), 1 + byte(e%250)}),
				Port: port, Ready: true, Serving: true})
		}
		svc.Ports = append(svc.Ports, sp)
	}
	return &model.Node{Name: "node-a", Addresses: []netip.Addr{workload.NodeAddr}}, []*model.Service{svc}
}

// sticky copies services with ClientIP affinity (a day) on every port.
func sticky(in []*model.Service) []*model.Service {
	out := make([]*model.Service, len(in))
	for i, s := range in {
		c := *s
		c.Ports = append([]model.ServicePort(nil), s.Ports...)
		for j := range c.Ports {
			c.Ports[j].AffinityTimeout = day
		}
		out[i] = &c
	}
	return out
}

// report runs one full sync of services into a fresh namespace and prints its figures.
func report(name string, run int, b *ruleset.Builder, node *model.Node, services []*model.Service) {
	ns, err := netns.Create("nftp-aff")
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Close()
	k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()
	runtime.GC()
	_, s0 := cpuTimes()
	start := time.Now()
	r := reconciler.New(k, logr.Discard(), time.Now, b.Table())
	r.Set(b.Table(), reconciler.Owner{}, b.Base(node))
	for _, s := range services {
		r.Set(b.Table(), reconciler.Owner{Namespace: s.Key.Namespace, Name: s.Key.Name}, b.Service(node, s))
	}
	res, err := r.Commit(context.Background(), true)
	total := time.Since(start)
	_, s1 := cpuTimes()
	if err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	c := res.Objects[nft.IPv4]
	fmt.Fprintf(os.Stdout, "%-40s run=%d full-sync=%v kernel=%v sys=%v ops=%d sets=%d chains=%d rules=%d\n",
		name, run, total.Round(time.Millisecond), res.Stats.Duration.Round(time.Millisecond), (s1 - s0).Round(time.Millisecond),
		res.Ops, c.Sets, c.Chains, c.Rules)
}

func cpuTimes() (user, sys time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
