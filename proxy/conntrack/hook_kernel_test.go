package conntrack_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/proxy/conntrack"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/test/lab"
)

// TestHookRetriesFailedCleanupKernel: real UDP flows through the lab's node to the dns Service,
// IPv4 and IPv6, DNAT'ed to pod-1. The rules then send new flows to pod-2 and the Service's
// model loses pod-1, but that sync's cleanup fails (its context is cancelled), so the flows keep
// their entries and still reach pod-1. The next sync changes nothing; its hook call retries the
// cleanup: the same 5-tuples now reach pod-2, and a third call deletes nothing more.
func TestHookRetriesFailedCleanupKernel(t *testing.T) {
	l := lab.New(t, lab.Options{Prefix: "nftp-ctr", Pods: 2, Ports: []lab.PortSpec{lab.Port(5353)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	point(t, l, 1)
	var flows []*lab.Flow
	for _, dst := range []netip.Addr{lab.ClusterIPv4(1), lab.ClusterIPv6(1)} {
		f := lab.NewFlow(l.Client(1).NS, "udp", netip.AddrPortFrom(dst, 53).String())
		t.Cleanup(f.Close)
		if r := f.Probe(ctx); r.Outcome != lab.Replied || r.Reply.Pod != "pod-1" {
			t.Fatalf("%s: first probe got %v, want a reply from pod-1", f, r)
		}
		flows = append(flows, f)
	}

	c, err := conntrack.New(logr.Discard(), conntrack.WithNetNSFd(l.Node.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	counter := &counting{c: c}
	h := conntrack.NewHookOver(counter)
	dns := func(pods ...int) map[model.ServiceKey]*model.Service {
		s := models(pods...)[0]
		return map[model.ServiceKey]*model.Service{s.Key: s}
	}
	if err := h.AfterChanges(ctx, dns(1), false, l.NodeIPs()); err != nil {
		t.Fatal(err)
	}
	if counter.deleted != 0 {
		t.Fatalf("the first cleanup deleted %d entries of flows to a serving endpoint", counter.deleted)
	}

	point(t, l, 2)
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if err := h.AfterChanges(cancelled, dns(2), false, l.NodeIPs()); err == nil {
		t.Fatal("a cleanup with a cancelled context reported no error")
	}
	for _, f := range flows {
		if r := f.Probe(ctx); r.Outcome != lab.Replied || r.Reply.Pod != "pod-1" {
			t.Fatalf("%s after the failed cleanup: got %v, want pod-1 still (its entry stays)", f, r)
		}
	}

	if err := h.AfterChanges(ctx, nil, false, l.NodeIPs()); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if counter.deleted != 2 {
		t.Errorf("the retry deleted %d entries, want 2 (the IPv4 and IPv6 flows to pod-1)", counter.deleted)
	}
	for _, f := range flows {
		if r := f.Probe(ctx); r.Outcome != lab.Replied || r.Reply.Pod != "pod-2" {
			t.Errorf("%s after the retry: same 5-tuple got %v, want a reply from pod-2", f, r)
		}
	}
	before := counter.calls
	if err := h.AfterChanges(ctx, nil, false, l.NodeIPs()); err != nil || counter.calls != before {
		t.Errorf("a sync after the successful retry: %d more cleanups (error %v), want none", counter.calls-before, err)
	}
}

// counting passes cleanups to a Cleaner and counts them and what they deleted.
type counting struct {
	c              *conntrack.Cleaner
	calls, deleted int
}

func (k *counting) Cleanup(ctx context.Context, targets []conntrack.Target) (conntrack.Result, error) {
	k.calls++
	res, err := k.c.Cleanup(ctx, targets)
	k.deleted += res.Total()
	return res, err
}

// TestHookFullSyncSweepsKernel: flows that escaped the cleanup of their change (here: created
// through rules that still DNAT to pod-1 after the hook was told pod-2 replaced it, as a datagram
// racing the commit would be) are left by partial syncs and deleted after the next full one,
// IPv4 and IPv6; a flow to the serving pod-2 keeps its entry.
func TestHookFullSyncSweepsKernel(t *testing.T) {
	l := lab.New(t, lab.Options{Prefix: "nftp-cts", Pods: 2, Ports: []lab.PortSpec{lab.Port(5353)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := conntrack.New(logr.Discard(), conntrack.WithNetNSFd(l.Node.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	counter := &counting{c: c}
	h := conntrack.NewHookOver(counter)
	dns := func(pods ...int) map[model.ServiceKey]*model.Service {
		s := models(pods...)[0]
		return map[model.ServiceKey]*model.Service{s.Key: s}
	}
	if err := h.AfterChanges(ctx, dns(2), true, l.NodeIPs()); err != nil {
		t.Fatal(err)
	}

	open := func(dst netip.Addr, want string) *lab.Flow {
		f := lab.NewFlow(l.Client(1).NS, "udp", netip.AddrPortFrom(dst, 53).String())
		t.Cleanup(f.Close)
		if r := f.Probe(ctx); r.Outcome != lab.Replied || r.Reply.Pod != want {
			t.Fatalf("%s: first probe got %v, want a reply from %s", f, r, want)
		}
		return f
	}
	point(t, l, 1)
	escaped := []*lab.Flow{open(lab.ClusterIPv4(1), "pod-1"), open(lab.ClusterIPv6(1), "pod-1")}
	point(t, l, 2)
	live := open(lab.ClusterIPv4(1), "pod-2")

	if err := h.AfterChanges(ctx, nil, false, l.NodeIPs()); err != nil || counter.deleted != 0 {
		t.Fatalf("a partial sync with no change: deleted %d (error %v), want nothing", counter.deleted, err)
	}
	if err := h.AfterChanges(ctx, nil, true, l.NodeIPs()); err != nil {
		t.Fatal(err)
	}
	if counter.deleted != 2 {
		t.Errorf("the full sync's sweep deleted %d entries, want 2 (the escaped IPv4 and IPv6 flows)", counter.deleted)
	}
	for _, f := range append(escaped, live) {
		if r := f.Probe(ctx); r.Outcome != lab.Replied || r.Reply.Pod != "pod-2" {
			t.Errorf("%s after the sweep: same 5-tuple got %v, want a reply from pod-2", f, r)
		}
	}
}

// TestHookSweepsWhenNodePortAddressesChange: the node serves node ports on its uplink addresses
// only; a client sends to the dns node port on the node's own address on its link (IPv4 and
// IPv6), which nothing translates: the node refuses it, and the flow's entry records it
// untranslated. Once that address serves node ports too (the rules DNAT it to pod-1), the same
// 5-tuple is still refused until the hook is told the new addresses: with no Service changed, it
// deletes those entries, and the flows reach pod-1.
func TestHookSweepsWhenNodePortAddressesChange(t *testing.T) {
	l := lab.New(t, lab.Options{Prefix: "nftp-cta", Pods: 2, Ports: []lab.PortSpec{lab.Port(5353)}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	point(t, l, 1)
	c, err := conntrack.New(logr.Discard(), conntrack.WithNetNSFd(l.Node.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	counter := &counting{c: c}
	h := conntrack.NewHookOver(counter)
	uplink := []netip.Addr{netip.MustParseAddr(lab.NodeIPv4), netip.MustParseAddr(lab.NodeIPv6)}
	gained := []netip.Addr{lab.ClientGatewayV4(1), lab.ClientGatewayV6(1)}
	all := models(1)
	s := all[0] // dns, node port 30053
	if err := h.AfterChanges(ctx, map[model.ServiceKey]*model.Service{s.Key: s}, true, uplink); err != nil {
		t.Fatal(err)
	}

	var flows []*lab.Flow
	for _, a := range gained {
		f := lab.NewFlow(l.Client(1).NS, "udp", netip.AddrPortFrom(a, 30053).String())
		t.Cleanup(f.Close)
		if r := f.Probe(ctx); r.Outcome != lab.Refused {
			t.Fatalf("%s before the address serves node ports: got %v, want refused by the node", f, r)
		}
		flows = append(flows, f)
	}
	if err := l.NftApply("add rule ip cttest services ip daddr " + gained[0].String() + " udp dport 30053 dnat to " + lab.PodIPv4(1).String() + ":5353\n" +
		"add rule ip6 cttest services ip6 daddr " + gained[1].String() + " udp dport 30053 dnat to [" + lab.PodIPv6(1).String() + "]:5353\n"); err != nil {
		t.Fatal(err)
	}
	for _, f := range flows {
		if r := f.Probe(ctx); r.Outcome != lab.Refused {
			t.Fatalf("%s once translated, before the cleanup: got %v, want still refused (its entry is untranslated)", f, r)
		}
	}
	if err := h.AfterChanges(ctx, nil, false, uplink); err != nil || counter.deleted != 0 {
		t.Fatalf("a sync with nothing changed: deleted %d (error %v), want nothing", counter.deleted, err)
	}
	if err := h.AfterChanges(ctx, nil, false, append(uplink, gained...)); err != nil {
		t.Fatal(err)
	}
	if counter.deleted != 2 {
		t.Errorf("after the node-port addresses grew, deleted %d entries, want 2 (IPv4 and IPv6)", counter.deleted)
	}
	for _, f := range flows {
		if r := f.Probe(ctx); r.Outcome != lab.Replied || r.Reply.Pod != "pod-1" {
			t.Errorf("%s after the cleanup: same 5-tuple got %v, want a reply from pod-1", f, r)
		}
	}
}
