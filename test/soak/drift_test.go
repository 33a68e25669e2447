package soak

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/tier"
)

// otherTable is someone else's table in the node: nftproxy must never touch it. Its rule only
// matches a source that never sends, so its content cannot change by itself.
const otherTable = `table inet other {
	set blocked {
		type ipv4_addr
		elements = { 198.18.99.1 }
	}
	chain input {
		type filter hook input priority 0; policy accept;
		ip saddr @blocked drop
	}
}
`

// driftServices: web keeps serving; a pick chain of 2 endpoints (web's or victim's, with the
// elements going to it) and lonely's map element are deleted.
func driftServices() []fixture.Service {
	return []fixture.Service{
		{Name: "web", ClusterIPs: []netip.Addr{lab.ClusterIPv4(1), lab.ClusterIPv6(1)},
			Ports:     []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80}, {Name: "dns", Protocol: "UDP", Port: 80}},
			Endpoints: fixture.Pods(1, 2)},
		{Name: "victim", ClusterIPs: []netip.Addr{lab.ClusterIPv4(3)},
			Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80}}, Endpoints: fixture.Pods(1, 2)},
		{Name: "lonely", ClusterIPs: []netip.Addr{lab.ClusterIPv4(4)},
			Ports: []fixture.Port{{Name: "http", Protocol: "TCP", Port: 80}}, Endpoints: fixture.Pods(2)},
	}
}

// drift is one thing an operator does to the node's nftables behind the daemon's back.
type drift struct {
	name string
	// script builds the nft script from the current ip table listing.
	script func(t *testing.T, ipTable string) string
	// touchesOther is set when the drift removes the other table too (flush ruleset); it is
	// restored afterwards, as its owner would.
	touchesOther bool
}

// toPick2 matches the dispatch elements that go to a shared chain pick-2 (of some endpoint-map
// shard), capturing the key and the chain.
var toPick2 = regexp.MustCompile(`([0-9.]+ \. (?:tcp|udp) \. [0-9]+) comment "[^"]*" : goto (pick-2-s[0-9]+)\b`)

func drifts() []drift {
	return []drift{
		{name: "delete a shared pick chain (and the map elements that jump to it)", script: func(t *testing.T, ipTable string) string {
			var keys []string
			chain := ""
			for _, m := range toPick2.FindAllStringSubmatch(ipTable, -1) {
				if chain == "" {
					chain = m[2]
				}
				if m[2] == chain {
					keys = append(keys, m[1])
				}
			}
			if len(keys) == 0 || !strings.Contains(ipTable, "chain "+chain+" {") {
				t.Fatalf("no chain pick-2-sN and elements going to it in:\n%s", ipTable)
			}
			return fmt.Sprintf("delete element ip nftproxy service-ips { %s }\nflush chain ip nftproxy %s\ndelete chain ip nftproxy %s\n",
				strings.Join(keys, ", "), chain, chain)
		}},
		{name: "delete a map element", script: func(*testing.T, string) string {
			return fmt.Sprintf("delete element ip nftproxy service-ips { %s . tcp . 80 }\n", lab.ClusterIPv4(4))
		}},
		{name: "add a stray rule to our chain", script: func(*testing.T, string) string {
			return fmt.Sprintf("insert rule ip nftproxy services ip daddr %s tcp dport 80 drop comment \"stray\"\n", lab.ClusterIPv4(1))
		}},
		{name: "delete table ip6 nftproxy", script: func(*testing.T, string) string {
			return "delete table ip6 nftproxy\n"
		}},
		{name: "nft flush ruleset", touchesOther: true, script: func(*testing.T, string) string {
			return "flush ruleset\n"
		}},
	}
}

// TestDrift edits the daemon's tables behind its back while it serves, the way an operator
// could, and measures how long the periodic full resync takes to put them back exactly and
// what nftproxy_drift_repairs_total counted. Someone else's table stays byte for byte the same.
// The daemon runs with --drift-events=false, so only the periodic resync repairs
// (TestDriftFoundByEvents covers the events).
func TestDrift(t *testing.T) {
	const scenario = "2 drift"
	e := newEnv(t, lab.Options{Pods: 2}, 3*time.Minute)
	e.write(driftServices()...)
	if err := e.lab.NftApply(otherTable); err != nil {
		t.Fatal(err)
	}
	otherBefore := e.otherTable()
	d := e.start("daemon", daemonBinary, metricsAddress, healthzAddress,
		"--min-sync-period", "50ms", "--full-sync-period", run.fullSync.String(), "--drift-events=false")
	e.waitSynced(d, 30*time.Second)
	want := e.desiredState()
	if _, diff := e.waitState(want, 15*time.Second); diff != "" {
		t.Fatalf("before any drift: kernel state differs from the rendered manifests: %s", diff)
	}
	e.checkServing("before any drift")

	// No drift, no repair: two full resyncs must count nothing.
	m0, err := e.scrape(d)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2*run.fullSync + 500*time.Millisecond)
	m1, err := e.scrape(d)
	if err != nil {
		t.Fatal(err)
	}
	fulls := tier.Delta(m0, m1, `nftproxy_sync_duration_seconds_count{kind="full"}`)
	idle := tier.Delta(m0, m1, "nftproxy_drift_repairs_total")
	report.Add(t, scenario, "full resyncs without drift", "%.0f in %v, %.0f repairs counted (--full-sync-period %v)",
		fulls, 2*run.fullSync+500*time.Millisecond, idle, run.fullSync)
	if idle != 0 {
		t.Errorf("full resyncs with no drift counted %.0f repairs; want 0", idle)
	}

	limit := 5*run.fullSync + 10*time.Second
	for _, dr := range drifts() {
		if !e.driftRepaired(d, dr, want, limit, scenario, "", true) {
			continue
		}
		if dr.touchesOther {
			// Its owner loads it again; later resyncs must leave it alone.
			if err := e.lab.NftApply(otherTable); err != nil {
				t.Fatal(err)
			}
			otherBefore = e.otherTable()
			time.Sleep(2*run.fullSync + 500*time.Millisecond)
		}
		if got := e.otherTable(); got != otherBefore {
			t.Errorf("%s: table inet other changed:\n%s\nwant:\n%s", dr.name, got, otherBefore)
		}
	}
	if tables, _ := e.lab.Nft("list", "tables"); strings.Count(tables, "\n") != 3 {
		t.Errorf("tables in the node: %s; want ip nftproxy, ip6 nftproxy and inet other only", tables)
	}
	report.Add(t, scenario, "table inet other", "identical byte for byte after every drift and repair")
	d.checkHealthy(t)
}

// TestDriftFoundByEvents runs the daemon with the default --full-sync-period (an hour: no
// periodic resync happens during the test). It learns of every foreign change to its tables
// from nftables events and repairs it within a bounded wait; a change to another writer's table
// starts no verification.
func TestDriftFoundByEvents(t *testing.T) {
	const scenario = "2b drift found by events"
	e := newEnv(t, lab.Options{Pods: 2}, 3*time.Minute)
	e.write(driftServices()...)
	if err := e.lab.NftApply(otherTable); err != nil {
		t.Fatal(err)
	}
	d := e.start("daemon", daemonBinary, metricsAddress, healthzAddress, "--min-sync-period", "50ms")
	e.waitSynced(d, 30*time.Second)
	want := e.desiredState()
	if _, diff := e.waitState(want, 15*time.Second); diff != "" {
		t.Fatalf("before any drift: kernel state differs from the rendered manifests: %s", diff)
	}
	e.checkServing("before any drift")

	// Another table changes, then one of our elements goes: only the second is suspected
	// (events arrive in commit order, so once the second is repaired the first was seen).
	const suspected = `nftproxy_drift_suspected_total{cause="foreign_change"}`
	const fulls = `nftproxy_sync_duration_seconds_count{kind="full"}`
	m0, err := e.scrape(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.lab.NftApply("add element inet other blocked { 198.18.99.2 }\n"); err != nil {
		t.Fatal(err)
	}
	if err := e.lab.NftApply(fmt.Sprintf("delete element ip nftproxy service-ips { %s . tcp . 80 }\n", lab.ClusterIPv4(4))); err != nil {
		t.Fatal(err)
	}
	limit := 30 * time.Second // generous: a bound for a broken daemon, not a timing target
	took, diff := e.waitState(want, limit)
	if diff != "" {
		t.Fatalf("deleted element not repaired after %v (the full-sync period is an hour): %s", limit, diff)
	}
	var m1 tier.Sample
	_ = e.poll(5*time.Second, func() (bool, error) {
		var err error
		m1, err = e.scrape(d)
		return err == nil && tier.Delta(m0, m1, "nftproxy_drift_repairs_total") > 0, err
	})
	if n := tier.Delta(m0, m1, suspected); n != 1 {
		t.Errorf("%s rose by %.0f for one change to another table and one to ours; want 1", suspected, n)
	}
	if n := tier.Delta(m0, m1, fulls); n != 1 {
		t.Errorf("%.0f full syncs for one change to ours; want 1", n)
	}
	report.Add(t, scenario, "another table changed, then one of our elements deleted", "repaired in %v; suspected +%.0f, full syncs +%.0f, repairs +%.0f",
		took.Round(time.Millisecond), tier.Delta(m0, m1, suspected), tier.Delta(m0, m1, fulls), tier.Delta(m0, m1, "nftproxy_drift_repairs_total"))

	for _, dr := range drifts() {
		e.driftRepaired(d, dr, want, limit, scenario, " with the default full-sync period", false)
	}
	d.checkHealthy(t)
}

// driftRepaired makes drift dr in the node's ip table, waits up to limit for the kernel to be want
// again, and checks the repair was counted and the Services answer; the figure goes to the report
// under scenario. It reports whether the drift was repaired (what names the setting, for errors).
// With slowRepair (no drift events: nothing repairs before the next full resync) it first checks
// that the drift really changed the kernel; with events the repair may already be done.
func (e *env) driftRepaired(d *daemon, dr drift, want state, limit time.Duration, scenario, what string, slowRepair bool) bool {
	t := e.t
	t.Helper()
	ipTable, err := e.lab.Nft("list", "table", "ip", "nftproxy")
	if err != nil {
		t.Fatal(err)
	}
	before, err := e.scrape(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.lab.NftApply(dr.script(t, ipTable)); err != nil {
		t.Fatalf("%s: %v", dr.name, err)
	}
	if diff := e.nodeState().diff(want, 5); slowRepair && diff == "" {
		t.Fatalf("%s: the kernel state did not change; the drift is not one", dr.name)
	}
	took, diff := e.waitState(want, limit)
	if diff != "" {
		t.Errorf("%s: not repaired after %v%s: %s", dr.name, limit, what, diff)
		return false
	}
	var counted float64
	_ = e.poll(5*time.Second, func() (bool, error) {
		after, err := e.scrape(d)
		if err != nil {
			return false, err
		}
		counted = tier.Delta(before, after, "nftproxy_drift_repairs_total")
		return counted > 0, nil
	})
	report.Add(t, scenario, dr.name, "repaired in %v; nftproxy_drift_repairs_total +%.0f", took.Round(time.Millisecond), counted)
	if counted == 0 {
		t.Errorf("%s: repaired, but nftproxy_drift_repairs_total did not count it", dr.name)
	}
	e.checkServing("after repairing: " + dr.name)
	return true
}

// otherTable is `nft list table inet other` in the node.
func (e *env) otherTable() string {
	e.t.Helper()
	out, err := e.lab.Nft("list", "table", "inet", "other")
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// checkServing probes every drift Service once per protocol from the client.
func (e *env) checkServing(when string) {
	e.t.Helper()
	for _, s := range driftServices() {
		for _, a := range s.ClusterIPs {
			for _, p := range s.Ports {
				tg := target{name: s.Name, network: strings.ToLower(string(p.Protocol)), addr: a, first: uint16(p.Port)}
				if why := probe(e.ctx, e.lab.Client(1).NS, tg); why != "" {
					e.t.Errorf("%s: %s %s %s: %s", when, s.Name, p.Protocol, a, why)
				}
			}
		}
	}
}
