package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

const (
	// healthzAddress and metricsAddress are on the node's loopback: reachable only from inside
	// the lab's node namespace.
	healthzAddress = "127.0.0.1:10256"
	metricsAddress = "127.0.0.1:10249"
	// readyWait bounds the wait for the daemon's first sync of the manifests.
	readyWait = 15 * time.Second
)

// startDaemon runs nftproxy in the node and waits (bounded) until its rules for every example
// Service are in the kernel and /healthz says so.
func (d *demo) startDaemon(ctx context.Context) error {
	argv := []string{d.cfg.binary, "run",
		"--manifests", d.cfg.manifests,
		"--node-name", "node-a",
		"--cluster-cidr", lab.PodCIDRv4 + "," + lab.PodCIDRv6,
		"--service-cidr", lab.ServiceCIDRv4 + "," + lab.ServiceCIDRv6,
		"--min-sync-period", "50ms",
		"--healthz-bind-address", healthzAddress,
		"--metrics-bind-address", metricsAddress,
		"-v", "2",
	}
	p, err := d.lab.StartInNode(ctx, argv...)
	if err != nil {
		return err
	}
	d.daemon = p
	fmt.Fprintf(d.out, "nftproxy run --manifests %s --node-name node-a --cluster-cidr %s,%s --service-cidr %s,%s --min-sync-period 50ms\n",
		d.cfg.manifests, lab.PodCIDRv4, lab.PodCIDRv6, lab.ServiceCIDRv4, lab.ServiceCIDRv6)
	return d.waitReady(ctx, p)
}

// readyMarks are what the daemon's ip table holds once it has programmed every example: one
// Service of each shape and the Node's address (node ports). The ip and ip6 tables are written
// in one transaction, so the ip6 half is there too.
var readyMarks = []string{"default/web/tcp/http", "voip/rtp/udp/rtp", "default/anyport/tcp/all", lab.NodeIPv4}

func (d *demo) waitReady(ctx context.Context, p *lab.Process) error {
	ctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	why := "no table yet"
	for {
		select {
		case <-p.Done():
			return fmt.Errorf("nftproxy exited before programming the examples: %v", p.Err())
		case <-ctx.Done():
			return fmt.Errorf("nftproxy not ready after %v: %s", readyWait, why)
		case <-tick.C:
		}
		table, err := d.lab.Nft("list", "table", "ip", "nftproxy")
		if err != nil {
			continue
		}
		if m := missing(table, readyMarks); m != "" {
			why = "table ip nftproxy lacks " + m
			continue
		}
		code, body, err := httpGet(ctx, d.lab.Node, "http://"+healthzAddress+"/healthz")
		if err != nil || code != http.StatusOK {
			why = fmt.Sprintf("/healthz: %d %v %s", code, err, strings.TrimSpace(body))
			continue
		}
		return nil
	}
}

func missing(text string, marks []string) string {
	for _, m := range marks {
		if !strings.Contains(text, m) {
			return m
		}
	}
	return ""
}

// httpGet fetches url from inside ns: the connection is dialled on a thread switched into it.
func httpGet(ctx context.Context, ns *netns.NS, url string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := ns.HTTPClient(2 * time.Second).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	return resp.StatusCode, string(b), err
}

// excerptBlocks are the parts of `nft list table ip nftproxy` worth a look: the dispatch maps
// (one lookup per packet, whatever the number of Services), the shards of the endpoint maps
// that hold elements (each frontend's endpoints in slots) and the chains shared by every port with N endpoints.
var excerptBlocks = []string{"map service-ips ", "map service-ranges ", "map service-allports ",
	"map service-nodeports ", "map endpoints-s", "map nodeport-endpoints-s", "chain services ", "chain pick-", "chain masq-pick-"}

// printRuleset prints the excerpt.
func (d *demo) printRuleset() {
	table, err := d.lab.Nft("list", "table", "ip", "nftproxy")
	if err != nil {
		fmt.Fprintf(d.out, "nft list table ip nftproxy: %v\n", err)
		return
	}
	fmt.Fprintln(d.out, "nft list table ip nftproxy (excerpt: dispatch maps, the services chain, endpoint maps, shared pick chains):")
	for _, block := range tableBlocks(table) {
		head := strings.TrimSpace(block[0]) + " "
		for _, want := range excerptBlocks {
			if strings.HasPrefix(head, want) && (!strings.HasPrefix(want, "map ") || strings.Contains(strings.Join(block, "\n"), "elements = ")) {
				for _, line := range block {
					fmt.Fprintln(d.out, "  "+strings.ReplaceAll(strings.TrimPrefix(line, "\t"), "\t", "  "))
				}
				break
			}
		}
	}
}

// tableBlocks splits an `nft list table` listing into its top-level blocks (one set, map or
// chain each, opening line to closing brace).
func tableBlocks(listing string) [][]string {
	var blocks [][]string
	var cur []string
	for _, line := range strings.Split(listing, "\n") {
		switch {
		case strings.HasPrefix(line, "\t") && !strings.HasPrefix(line, "\t\t") && strings.HasSuffix(line, "{"):
			cur = []string{line}
		case line == "\t}" && cur != nil:
			blocks = append(blocks, append(cur, line))
			cur = nil
		case cur != nil:
			cur = append(cur, line)
		}
	}
	return blocks
}

// metricPrefixes pick the sync lines out of /metrics (histogram buckets left out).
var metricPrefixes = []string{"nftproxy_sync_", "nftproxy_network_programming_duration_seconds_count",
	"nftproxy_network_programming_duration_seconds_sum"}

func (d *demo) printMetrics(ctx context.Context) {
	code, body, err := httpGet(ctx, d.lab.Node, "http://"+metricsAddress+"/metrics")
	if err != nil || code != http.StatusOK {
		fmt.Fprintf(d.out, "metrics: GET /metrics: %d %v\n", code, err)
		return
	}
	fmt.Fprintf(d.out, "nftproxy /metrics on the node's %s (sync lines):\n", metricsAddress)
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || strings.Contains(line, "_bucket{") {
			continue
		}
		for _, p := range metricPrefixes {
			if strings.HasPrefix(line, p) {
				fmt.Fprintln(d.out, "  "+line)
				break
			}
		}
	}
}

// leftNamespaces lists the named namespaces that still start with prefix.
func leftNamespaces(prefix string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("ip netns list: %w", err)
	}
	var left []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			left = append(left, f[0])
		}
	}
	return left, nil
}
