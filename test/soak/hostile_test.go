package soak

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// hostileInput is one manifest file given to the running daemon.
type hostileInput struct {
	file    string
	content string
	// rejected maps each Service name (namespace "hostile") to the reason it must be rejected
	// with (proxy/model/REASONS.md).
	rejected map[string]string
	// probes are what must answer (or be refused) once the file is loaded.
	probes []hostileProbe
	// skipped means the whole file must be refused (logged); absent lists Services that
	// must then not be programmed.
	skipped bool
	absent  []string
}

// hostileProbe is one TCP probe from the client and its expected outcome.
type hostileProbe struct {
	addr    string // ip:port
	outcome lab.Outcome
	pod     string // for Replied
	port    uint16 // port the pod saw, for Replied
}

// hsvc is a Service in namespace hostile; meta and spec are YAML flow-map bodies.
func hsvc(name, meta, spec string) string {
	return fmt.Sprintf("---\napiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: hostile%s}\nspec: {%s}\n", name, meta, spec)
}

// ann is the metadata part for annotations.
func ann(kv ...string) string {
	var parts []string
	for i := 0; i+1 < len(kv); i += 2 {
		parts = append(parts, fmt.Sprintf("%q: %q", kv[i], kv[i+1]))
	}
	return ", annotations: {" + strings.Join(parts, ", ") + "}"
}

// hslice is an EndpointSlice of service svc; ports and endpoints are YAML flow sequences.
func hslice(name, svc, family, ports, endpoints string) string {
	return fmt.Sprintf("---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: %s, namespace: hostile, labels: {kubernetes.io/service-name: %s}}\naddressType: %s\nports: %s\nendpoints: %s\n",
		name, svc, family, ports, endpoints)
}

const (
	rangesKey   = "nftproxy.io/port-ranges"
	allPortsKey = "nftproxy.io/all-ports"
	nodeRngKey  = "nftproxy.io/node-port-ranges"
	udpRTP      = "ports: [{name: rtp, port: 16384, protocol: UDP}]"
)

// hostileInputs is the corpus: one Service per rejection reason, the cases the design calls
// out (conflicting ranges on one IP, all-ports with external IPs or on NodePort, ports above
// 65535, huge ranges, 10k ports, duplicate EndpointSlices, bad endpoint addresses, IPv6 slices
// on an IPv4 Service) and files that are not manifests at all.
func hostileInputs() []hostileInput {
	ip := func(n int) string { return fmt.Sprintf("clusterIP: %s", lab.ClusterIPv4(n)) }
	reasons := []struct{ name, reason, meta, spec string }{
		{"syntax", "AnnotationSyntax", ann(rangesKey, "rtp=16384"), ip(101) + ", " + udpRTP},
		{"backwards", "RangeEndBeforeStart", ann(rangesKey, "rtp=16384-1000"), ip(102) + ", " + udpRTP},
		{"above-65535", "RangeEndTooLarge", ann(rangesKey, "rtp=16384-70000"), ip(103) + ", " + udpRTP},
		{"mismatch", "RangeStartMismatch", ann(rangesKey, "rtp=16384-16393"), ip(104) + ", ports: [{name: rtp, port: 16385, protocol: UDP}]"},
		{"unknown-name", "UnknownPortName", ann(rangesKey, "nope=16384-16393"), ip(105) + ", " + udpRTP},
		{"remap", "TargetPortRemap", ann(rangesKey, "rtp=16384-16393"), ip(106) + ", ports: [{name: rtp, port: 16384, targetPort: 9000, protocol: UDP}]"},
		{"overlap", "PortOverlap", ann(rangesKey, "rtp=5000-5100"), ip(107) + ", ports: [{name: rtp, port: 5000, protocol: UDP}, {name: sip, port: 5060, protocol: UDP}]"},
		{"allports-nodeport", "AllPortsNodePort", ann(allPortsKey, "true"), ip(108) + ", type: NodePort, ports: [{name: tcp, port: 1}]"},
		{"allports-headless", "AllPortsHeadless", ann(allPortsKey, "true"), "clusterIP: None, ports: [{name: tcp, port: 1}]"},
		{"allports-externalips", "AllPortsExternalIPs", ann(allPortsKey, "true"), ip(110) + ", externalIPs: [" + lab.ExternalIPv4(10).String() + "], ports: [{name: tcp, port: 1}]"},
		{"allports-ranges", "AllPortsWithRanges", ann(allPortsKey, "true", rangesKey, "tcp=1-100"), ip(111) + ", ports: [{name: tcp, port: 1}]"},
		{"nodeport-width", "NodePortRangeWidth", ann(rangesKey, "rtp=16384-16393", nodeRngKey, "rtp=40100-40104"), ip(112) + ", type: NodePort, ports: [{name: rtp, port: 16384, protocol: UDP, nodePort: 40100}]"},
		{"nodeport-name", "NodePortRangeUnknownName", ann(rangesKey, "rtp=16384-16393", nodeRngKey, "other=40110-40119"), ip(113) + ", type: NodePort, ports: [{name: rtp, port: 16384, protocol: UDP, nodePort: 40110}]"},
		{"bad-externalip", "InvalidAddress", "", ip(114) + ", externalIPs: [999.1.1.1], ports: [{name: http, port: 80}]"},
		{"bad-source-range", "InvalidAddress", "", ip(115) + ", type: LoadBalancer, loadBalancerSourceRanges: [198.18.1.0/33], ports: [{name: http, port: 80}]"},
		{"port-70000", "InvalidPort", "", ip(116) + ", ports: [{name: http, port: 70000}]"},
		{"icmp", "InvalidPort", "", ip(117) + ", ports: [{name: ping, port: 7, protocol: ICMP}]"},
		{"node-range", "NodeAddressRange", ann(rangesKey, "p=1-65535"), ip(118) + ", externalIPs: [" + lab.NodeIPv4 + "], ports: [{name: p, port: 1}]"},
		{"node-clusterip", "NodeAddressClusterIP", "", "clusterIP: " + lab.NodeIPv4 + ", ports: [{name: http, port: 2222}]"},
		{"reserved", "ReservedPort", "", ip(119) + ", externalIPs: [" + lab.NodeIPv4 + "], ports: [{name: ssh, port: 22}]"},
		{"metadata-clusterip", "SpecialAddress", "", "clusterIP: 169.254.169.254, ports: [{name: http, port: 80}]"},
		{"pod-clusterip", "ClusterIPOutsideServiceCIDR", "", "clusterIP: " + lab.PodIPv4(1).String() + ", ports: [{name: http, port: 80}]"},
	}
	var out []hostileInput
	for _, r := range reasons {
		out = append(out, hostileInput{file: "reason-" + r.name + ".yaml", content: hsvc(r.name, r.meta, r.spec),
			rejected: map[string]string{r.name: r.reason}})
	}
	// A '/' in a name: refused by manifest mode's API validation (it would make chain names of
	// two Services collide).
	out = append(out, hostileInput{file: "reason-apivalidation.yaml", content: hsvc(`"a/b"`, "", ip(118)+", ports: [{name: http, port: 80}]"),
		rejected: map[string]string{"a/b": "APIValidation"}})
	ext := lab.ExternalIPv4(5).String()
	// The newer Service names the older one's cluster IP and external IP, so every address it has
	// clashes: nothing is left to serve and it is rejected whole. (A clash on a shared address
	// alone withholds only that: test/e2e TestConflictWithholdsOnlyTheClash.)
	out = append(out, hostileInput{file: "conflict.yaml",
		content: hsvc("older", `, creationTimestamp: "2026-01-01T00:00:00Z"`+ann(rangesKey, "a=20000-20099"), ip(120)+", externalIPs: ["+ext+"], ports: [{name: a, port: 20000}]") +
			hslice("older-1", "older", "IPv4", "[{name: a, port: 20000, protocol: TCP}]", "[{addresses: [198.18.128.11]}]") +
			hsvc("newer", `, creationTimestamp: "2026-02-01T00:00:00Z"`+ann(rangesKey, "b=20050-20150"), ip(120)+", externalIPs: ["+ext+"], ports: [{name: b, port: 20050}]"),
		rejected: map[string]string{"newer": "ServiceConflict"},
		probes:   []hostileProbe{{addr: ext + ":20060", outcome: lab.Refused}}}) // older's range, pod-1 has no listener there: the pod resets
	out = append(out, hostileInput{file: "huge-range.yaml",
		content: hsvc("huge", ann(rangesKey, "all=1-65535"), ip(130)+", ports: [{name: all, port: 1}]") +
			hslice("huge-1", "huge", "IPv4", "[{name: all, port: 1, protocol: TCP}]", "[{addresses: [198.18.128.11]}]"),
		probes: []hostileProbe{{addr: lab.ClusterIPv4(130).String() + ":80", outcome: lab.Replied, pod: "pod-1", port: 80}}})
	out = append(out, hostileInput{file: "many-ports.yaml", content: manyPorts(run.bigService),
		probes: []hostileProbe{{addr: lab.ClusterIPv4(131).String() + ":15000", outcome: lab.Replied, pod: "pod-2", port: 80}}})
	// One valid Service whose rules would cost the kernel more than --max-service-cost allows
	// (250 ports × 400 endpoints: ~200,000 objects against the default 100,000): rejected, so its
	// commit cannot hold up every other Service's changes.
	out = append(out, hostileInput{file: "too-costly.yaml", content: tooCostly(250, 400),
		rejected: map[string]string{"too-costly": "CostLimit"}})
	out = append(out, hostileInput{file: "dup-a.yaml",
		content: hsvc("dup", "", ip(132)+", ports: [{name: http, port: 80}]") +
			hslice("dup-1", "dup", "IPv4", "[{name: http, port: 80, protocol: TCP}]", "[{addresses: [198.18.128.11]}]") +
			hslice("dup-2", "dup", "IPv4", "[{name: http, port: 80, protocol: TCP}]", "[{addresses: [198.18.128.11]}]"),
		probes: []hostileProbe{{addr: lab.ClusterIPv4(132).String() + ":80", outcome: lab.Replied, pod: "pod-1", port: 80}}})
	out = append(out, hostileInput{file: "dup-b.yaml", skipped: true, // dup-1 again, pointing elsewhere
		content: hslice("dup-1", "dup", "IPv4", "[{name: http, port: 80, protocol: TCP}]", "[{addresses: [198.18.128.12]}]")})
	out = append(out, hostileInput{file: "bad-endpoints.yaml",
		content: hsvc("bad-endpoints", "", ip(133)+", ports: [{name: http, port: 80}]") +
			hslice("bad-endpoints-1", "bad-endpoints", "IPv4", "[{name: http, port: 80, protocol: TCP}]",
				`[{addresses: [not-an-ip]}, {addresses: ["198.18.128.300"]}, {addresses: ["fd00:128::12"]}, {addresses: [""]}, {addresses: [198.18.128.11]}]`),
		probes: []hostileProbe{{addr: lab.ClusterIPv4(133).String() + ":80", outcome: lab.Replied, pod: "pod-1", port: 80}}})
	out = append(out, hostileInput{file: "v6-slice.yaml",
		content: hsvc("v6-slice", "", ip(134)+", ipFamilies: [IPv4], ports: [{name: http, port: 80}]") +
			hslice("v6-slice-1", "v6-slice", "IPv6", "[{name: http, port: 80, protocol: TCP}]", `[{addresses: ["fd00:128::11"]}]`),
		probes: []hostileProbe{{addr: lab.ClusterIPv4(134).String() + ":80", outcome: lab.Refused}}})
	// Not manifests: the file is refused, other files load.
	rnd := rand.New(rand.NewPCG(8, 8))
	noise := make([]byte, 4096)
	for i := range noise {
		noise[i] = byte(rnd.UintN(256))
	}
	out = append(out,
		hostileInput{file: "noise.yaml", content: string(noise), skipped: true},
		hostileInput{file: "alias-bomb.yaml", skipped: true, content: aliasBomb()},
		hostileInput{file: "wrong-types.yaml", skipped: true, content: hsvc("wrong-types", "", ip(135)+", ports: [{name: http, port: eighty}]")},
		hostileInput{file: "half-good.yaml", skipped: true, absent: []string{"half-good"},
			content: hsvc("half-good", "", ip(136)+", ports: [{name: http, port: 80}]") + "---\n{{{ not yaml\n"},
		hostileInput{file: "deep.json", skipped: true, content: strings.Repeat("[", 10000) + strings.Repeat("]", 10000)},
		hostileInput{file: "other-kind.yaml", content: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x, namespace: hostile}\n"},
		hostileInput{file: "empty.yaml", content: ""},
		hostileInput{file: "separators.yaml", content: "---\n---\n---\n"},
	)
	return out
}

// manyPorts is one Service with n TCP ports from 10000 on, every one to the pod's port 80.
func manyPorts(n int) string {
	var sp, ep strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			sp.WriteString(", ")
			ep.WriteString(", ")
		}
		fmt.Fprintf(&sp, "{name: p%d, port: %d, targetPort: 80}", 10000+i, 10000+i)
		fmt.Fprintf(&ep, "{name: p%d, port: 80, protocol: TCP}", 10000+i)
	}
	return hsvc("many-ports", "", fmt.Sprintf("clusterIP: %s, ports: [%s]", lab.ClusterIPv4(131), sp.String())) +
		hslice("many-ports-1", "many-ports", "IPv4", "["+ep.String()+"]", "[{addresses: [198.18.128.12]}]")
}

// tooCostly is one ClusterIP Service with ports TCP ports from 30000 on and eps endpoints.
func tooCostly(ports, eps int) string {
	var sp, pp, ep strings.Builder
	for i := 0; i < ports; i++ {
		if i > 0 {
			sp.WriteString(", ")
			pp.WriteString(", ")
		}
		fmt.Fprintf(&sp, "{name: p%d, port: %d}", i, 30000+i)
		fmt.Fprintf(&pp, "{name: p%d, port: %d, protocol: TCP}", i, 30000+i)
	}
	for i := 0; i < eps; i++ {
		if i > 0 {
			ep.WriteString(", ")
		}
		fmt.Fprintf(&ep, "{addresses: [198.18.%d.%d]}", 130+i/250, 1+i%250)
	}
	return hsvc("too-costly", "", fmt.Sprintf("clusterIP: %s, ports: [%s]", lab.ClusterIPv4(137), sp.String())) +
		hslice("too-costly-1", "too-costly", "IPv4", "["+pp.String()+"]", "["+ep.String()+"]")
}

// aliasBomb is a YAML document whose aliases expand to about a billion nodes.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// TestHostileInput gives the running daemon the hostile corpus while a canary Service next to
// it keeps answering: each bad Service is rejected with its documented reason (log, metric,
// render), each bad file is refused, the valid oddities work, and the daemon never panics.
func TestHostileInput(t *testing.T) {
	const scenario = "5 hostile input"
	e := newEnv(t, lab.Options{Pods: 2}, 3*time.Minute)
	canary := fixture.Service{Name: "canary", Namespace: "hostile", ClusterIPs: []netip.Addr{lab.ClusterIPv4(1)},
		Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "dns", Protocol: "UDP", Port: 80}}, Endpoints: fixture.Pods(1, 2)}
	e.write(canary)
	d := e.start("daemon", daemonBinary, metricsAddress, healthzAddress, "--min-sync-period", "50ms")
	e.waitSynced(d, 30*time.Second)
	e.waitRuleset(15*time.Second, canary.Key())

	targets := []target{
		{name: "tcp canary", network: "tcp", addr: lab.ClusterIPv4(1), first: 80, pods: []string{"pod-1", "pod-2"}},
		{name: "udp canary", network: "udp", addr: lab.ClusterIPv4(1), first: 80, pods: []string{"pod-1", "pod-2"}},
	}
	done := make(chan *tally, 1)
	go func() { done <- traffic(e.ctx, e.lab.Client(1).NS, targets, run.probeRate, 4*time.Second) }()
	inputs := hostileInputs()
	want := map[string]string{} // service -> reason
	for _, h := range inputs {
		e.writeFile(h.file, h.content)
		for s, r := range h.rejected {
			want[s] = r
		}
	}
	written := time.Now()
	var missing []string
	err := e.poll(60*time.Second, func() (bool, error) {
		missing = missing[:0]
		log := d.out.String()
		for s, r := range want {
			if countLines(log, `"service rejected: not programmed"`, `service="hostile/`+s+`"`, `reason="`+r+`"`) == 0 {
				missing = append(missing, s+" ("+r+")")
			}
		}
		return len(missing) == 0, nil
	})
	if err != nil {
		sort.Strings(missing)
		t.Errorf("rejections not logged after %v: %v", 60*time.Second, missing)
	}
	report.Add(t, scenario, "inputs", "%d files: %d rejected Services (%d reasons), valid oddities, non-manifests",
		len(inputs), len(want), len(reasonSet(want)))
	report.Add(t, scenario, "every rejection logged", "%v after the files were written", time.Since(written).Round(time.Millisecond))
	tl := <-done

	// Each reason is counted by the metric, listed by render, and nothing of a rejected
	// Service reaches the kernel.
	m, err := e.scrape(d)
	if err != nil {
		t.Fatal(err)
	}
	for r, n := range reasonSet(want) {
		if got := m[`nftproxy_invalid_services_total{reason="`+r+`"}`]; got < float64(n) {
			t.Errorf("nftproxy_invalid_services_total{reason=%q} = %v; want at least %d", r, got, n)
		}
	}
	rendered, err := e.lab.Node.Run(append([]string{daemonBinary, "render"}, e.flags()...)...)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := e.lab.Ruleset()
	if err != nil {
		t.Fatal(err)
	}
	for s, r := range want {
		if !strings.Contains(rendered, fmt.Sprintf("# rejected service hostile/%s (%s)", s, r)) {
			t.Errorf("render does not list hostile/%s as rejected for %s", s, r)
		}
		if strings.Contains(rs, `"hostile/`+s+`/`) {
			t.Errorf("rejected hostile/%s is in the ruleset", s)
		}
	}
	log := d.out.String()
	for _, h := range inputs {
		if h.skipped && countLines(log, "manifest skipped", h.file) == 0 {
			t.Errorf("%s: not reported as a skipped manifest", h.file)
		}
		for _, s := range h.absent {
			if strings.Contains(rs, `"hostile/`+s+`/`) {
				t.Errorf("%s: hostile/%s is in the ruleset; want its whole file refused", h.file, s)
			}
		}
		for _, p := range h.probes {
			r := probeDialer.Dial(e.ctx, e.lab.Client(1).NS, "tcp", p.addr)
			ok := r.Outcome == p.outcome && (p.outcome != lab.Replied || (r.Reply.Pod == p.pod && r.Reply.Port == p.port))
			if !ok {
				t.Errorf("%s: tcp %s: got %v; want %v %s %d", h.file, p.addr, r, p.outcome, p.pod, p.port)
			}
		}
	}
	attempted, failed := tl.total()
	report.Add(t, scenario, "canary probes attempted / failed", "%d / %d", attempted, failed)
	report.Add(t, scenario, "skipped files logged", "%d", countLines(log, "manifest skipped"))
	if failed > 0 {
		t.Errorf("the canary failed %d of %d probes while the hostile input was loaded:%s", failed, attempted, tl.failuresString())
	}
	for _, r := range model.AllReasons() {
		// Manifest mode's node-port assigner removes a block outside the block range (logging a
		// problem) before the model sees it, so this reason only arises in Kubernetes mode.
		// NodePortNotAssigned is that assigner's own count, not a model rejection.
		if r == model.ReasonNodePortBlockOutOfRange || r == model.ReasonNodePortNotAssigned {
			continue
		}
		if reasonSet(want)[r] == 0 && r != model.ReasonKernelRefused { // no input is meant to produce it
			t.Errorf("reason %s has no Service in the hostile corpus", r)
		}
	}
	d.checkHealthy(t)
	rss := d.peakRSS()
	if err := d.term(t); err != nil {
		t.Errorf("daemon exit after SIGTERM: %v; want 0", err)
	}
	d.checkNoPanic(t)
	report.Add(t, scenario, "daemon", "no panic, exit 0 on SIGTERM, peak RSS %s", rss)
}

func reasonSet(want map[string]string) map[string]int {
	out := map[string]int{}
	for _, r := range want {
		out[r]++
	}
	return out
}
