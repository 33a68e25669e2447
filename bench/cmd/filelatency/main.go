// Command filelatency measures manifest mode's "API→packet" for a new Service: nftproxy runs in
// the node namespace of a bench/probe topology over a manifest directory (optionally holding a
// workload written by bench/cmd/manifests), and each trial writes one new file with a Service
// and its EndpointSlice, timing until a new connection to the Service reaches its endpoint. It
// needs root and touches only the namespaces it creates.
//
//	go build -o /tmp/nftproxy ./cmd/nftproxy
//	go run ./bench/cmd/manifests -services 10000 -out /tmp/w
//	go run ./bench/cmd/filelatency -nftproxy /tmp/nftproxy -workload /tmp/w/workload.yaml
//	go run ./bench/cmd/filelatency -nftproxy /tmp/nftproxy -- --min-sync-period 1s
package main

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/nftproxy/nftproxy/bench/peers"
	"github.com/nftproxy/nftproxy/bench/probe"
	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/fixture"
)

func main() {
	bin := flag.String("nftproxy", "", "nftproxy binary (required)")
	work := flag.String("workload", "", "manifest file to serve besides the probes (bench/cmd/manifests); empty: only its Node")
	trials := flag.Int("trials", 9, "new Services to time")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "filelatency: -nftproxy is required")
		os.Exit(2)
	}
	lat, err := run(*bin, *work, *trials, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "filelatency:", err)
		os.Exit(1)
	}
	fmt.Printf("new Service, file written → packet (%d trials, flags %q): p50 %v, all %v\n",
		len(lat), flag.Args(), probe.Percentile(lat, 50), lat)
}

func run(bin, work string, trials int, extra []string) ([]time.Duration, error) {
	topo, err := probe.New()
	if err != nil {
		return nil, err
	}
	defer topo.Close()
	dir, err := os.MkdirTemp("", "filelatency")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if work != "" {
		b, err := os.ReadFile(work)
		if err != nil {
			return nil, err
		}
		if err := fixture.WriteFile(dir, "workload.yaml", string(b)); err != nil {
			return nil, err
		}
	} else if err := fixture.WriteFile(dir, "node.yaml", fixture.Node{Name: "bench-node", Addresses: []string{"198.18.0.1"}}.YAML()); err != nil {
		return nil, err
	}
	vip := netip.MustParseAddr("198.19.250.1")
	if err := fixture.WriteFile(dir, "probe.yaml", docs(peers.ProbeService("probe", vip, netip.MustParseAddr("198.18.15.1")))); err != nil {
		return nil, err
	}
	args := append([]string{bin, "run", "--manifests", dir, "--node-name", "bench-node", "--service-node-port-range", "30000-60000",
		"--ip-families", "ipv4", "--healthz-bind-address", "", "--metrics-bind-address", ""}, extra...)
	cmd := topo.Node.Command(args...)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if _, err := topo.WaitReply(netip.AddrPortFrom(vip, 80), "", start, 10*time.Minute); err != nil {
		return nil, fmt.Errorf("start-up: %w", err)
	}
	time.Sleep(3 * time.Second) // past the start-up syncs
	endpoint := netip.MustParseAddr("198.18.15.3")
	var lat []time.Duration
	for i := 0; i < trials && i < 250; i++ {
		time.Sleep(1500 * time.Millisecond) // a quiet cluster between changes
		ip := netip.AddrFrom4([4]byte{198, 19, 251, byte(i + 1)})
		t0 := time.Now()
		if err := fixture.WriteFile(dir, fmt.Sprintf("new-%d.yaml", i), docs(peers.ProbeService(fmt.Sprintf("new-%d", i), ip, endpoint))); err != nil {
			return lat, err
		}
		d, err := topo.WaitReply(netip.AddrPortFrom(ip, 80), endpoint.String(), t0, time.Minute)
		if err != nil {
			return lat, fmt.Errorf("new Service %d: %w", i, err)
		}
		lat = append(lat, d)
	}
	return lat, nil
}

// docs is s's Service and EndpointSlice as JSON documents of one manifest file.
func docs(s *model.Service) string {
	return fixture.YAML(workload.ServiceObject(s), workload.SliceObject(s, time.Now()))
}
