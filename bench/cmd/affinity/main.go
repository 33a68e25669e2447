// Command affinity measures what sessionAffinity ClientIP costs a full sync against the real
// kernel, in fresh network namespaces: one Service with many ports and endpoints (the shape of
// the issue: 250 TCP ports × 100 endpoints, timeoutSeconds 86400), and the benchmark workload
// with every Service port sticky against the same workload without affinity, alternating in
// one run. It drives the builder and the reconciler as the daemon does (one transaction) and
// prints, per case, the sync's wall time, the kernel's time for the batch (from the first byte
// sent to the answer) and the process's user and system CPU time (which, unlike the wall times,
// do not grow when other jobs share the CPUs); with -prune, the sync that removes an
// endpoint while the affinity map holds that many entries. Needs root. See bench/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
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
	wide6 := flag.Bool("wide-ip6", false, "also the wide Service in an ip6 table")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	prune := flag.Int("prune", 0, "entries in the affinity map when an endpoint is removed (0: skip the case; at most 131072)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
	if err != nil {
		log.Fatal(err)
	}
	b6, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv6, MasqueradeMark: 0x4000, DropMark: 0x8000})
	if err != nil {
		log.Fatal(err)
	}
	for r := 0; r < *runs; r++ {
		if *prune > 0 {
			pruneCase(r, b, *prune)
		}
		if !*skipWide {
			node, svcs := wide(*ports, *wideEps)
			report(fmt.Sprintf("wide %d ports x %d endpoints, affinity", *ports, *wideEps), r, b, node, svcs)
		}
		if *wide6 {
			node, svcs := wide6Service(*ports, *wideEps)
			report(fmt.Sprintf("ip6 wide %d ports x %d endpoints, affinity", *ports, *wideEps), r, b6, node, svcs)
		}
		if *services > 0 {
			w := workload.Generate(workload.DefaultSpec(*services, *endpoints, 1))
			report(fmt.Sprintf("%dx%d without affinity", *services, *endpoints), r, b, w.Node, w.Services)
			report(fmt.Sprintf("%dx%d all with affinity", *services, *endpoints), r, b, w.Node, sticky(w.Services))
		}
	}
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

// wide6Service is wide in IPv6 (fd00::/8).
func wide6Service(ports, n int) (*model.Node, []*model.Service) {
	node, svcs := wide(ports, n)
	for i := range svcs[0].Ports {
		sp := &svcs[0].Ports[i]
		sp.ClusterIPs = []netip.Addr{netip.MustParseAddr("fd00:19::10")}
		for j := range sp.Endpoints {
			a4 := sp.Endpoints[j].Addr.As4()
			sp.Endpoints[j].Addr = netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x18, 12: a4[0], 13: a4[1], 14: a4[2], 15: a4[3]})
		}
	}
	node.Addresses = []netip.Addr{netip.MustParseAddr("fd00:18::1")}
	return node, svcs
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
	u0, s0 := cpuTimes()
	start := time.Now()
	r := reconciler.New(k, logr.Discard(), time.Now, b.Table())
	r.Set(b.Table(), reconciler.Owner{}, b.Base(node))
	for _, s := range services {
		r.Set(b.Table(), reconciler.Owner{Namespace: s.Key.Namespace, Name: s.Key.Name}, b.Service(node, s))
	}
	res, err := r.Commit(context.Background(), true)
	total := time.Since(start)
	u1, s1 := cpuTimes()
	if err != nil {
		log.Fatalf("%s: %v", name, err)
	}
	c := res.Objects[b.Family()]
	fmt.Fprintf(os.Stdout, "%-40s run=%d full-sync=%v kernel=%v user=%v sys=%v ops=%d sets=%d chains=%d rules=%d\n",
		name, run, total.Round(time.Millisecond), res.Stats.Duration.Round(time.Millisecond), (u1 - u0).Round(time.Millisecond), (s1 - s0).Round(time.Millisecond),
		res.Ops, c.Sets, c.Chains, c.Rules)
}

// pruneCase: one sticky Service port with 10 endpoints, n clients recorded in the affinity map
// (added from here, as the packet path would), then a sync that removes one endpoint: the
// reconciler reads the map back and deletes that endpoint's entries within the sync.
func pruneCase(run int, b *ruleset.Builder, n int) {
	ns, err := netns.Create("nftp-affp")
	if err != nil {
		log.Fatal(err)
	}
	defer ns.Close()
	k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		log.Fatal(err)
	}
	defer k.Close()
	node, svcs := wide(1, 10)
	owner := reconciler.Owner{Namespace: "bench", Name: "wide"}
	lg := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	r := reconciler.New(k, lg, time.Now, b.Table())
	r.Set(b.Table(), reconciler.Owner{}, b.Base(node))
	r.Set(b.Table(), owner, b.Service(node, svcs[0]))
	if _, err := r.Commit(context.Background(), true); err != nil {
		log.Fatal(err)
	}
	sp := svcs[0].Ports[0]
	tx := nft.NewTransaction(b.Table())
	for i := 0; i < n; i++ {
		ep := sp.Endpoints[i%len(sp.Endpoints)]
		tx.Add(&nft.Element{Set: ruleset.MapAffinity, Timeout: time.Hour,
			Key:  []nft.Value{nft.Addr(clientAddr(i)), nft.Addr(sp.ClusterIPs[0]), nft.Proto(unix.IPPROTO_TCP), nft.Port(sp.Port)},
			Data: []nft.Value{nft.Addr(ep.Addr), nft.Port(ep.Port)}})
	}
	if _, err := k.Apply(context.Background(), tx); err != nil {
		log.Fatalf("seed %d entries: %v", n, err)
	}
	svcs[0].Ports[0].Endpoints = sp.Endpoints[1:]
	r.Set(b.Table(), owner, b.Service(node, svcs[0]))
	start := time.Now()
	res, err := r.Commit(context.Background(), false)
	total := time.Since(start)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%-40s run=%d sync=%v pruned=%d (of %d entries)\n", "endpoint removed, map loaded", run, total.Round(time.Millisecond), res.AffinityPruned, n)
}

// clientAddr is the i-th address of 198.18.0.0/15 (i below 131,072).
func clientAddr(i int) netip.Addr {
	v := 0xc6120000 + uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

func cpuTimes() (user, sys time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
