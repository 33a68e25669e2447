package trace

import (
	"errors"
	"math"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
)

// Address plan: node 198.18.1.1, outside client 198.18.1.2, pods 198.18.128.0/24, a service
// address 198.19.0.10.
var (
	node    = netip.MustParseAddr("198.18.1.1")
	client  = netip.MustParseAddr("198.18.1.2")
	svcIP   = netip.MustParseAddr("198.19.0.10")
	pod1    = netip.MustParseAddr("198.18.128.10")
	pod2    = netip.MustParseAddr("198.18.128.11")
	pod3    = netip.MustParseAddr("198.18.128.12")
	masqBit = uint32(0x4000)
)

func base(name string, typ nft.ChainType, h nft.Hook, prio int32) nft.Chain {
	return nft.Chain{Name: name, Base: &nft.BaseChain{Type: typ, Hook: h, Priority: prio}}
}

func rule(chain string, exprs ...nft.Expr) nft.Rule { return nft.Rule{Chain: chain, Exprs: exprs} }

func to(kind nft.VerdictKind, chain string) nft.Verdict { return nft.Verdict{Kind: kind, Chain: chain} }

var frontKey = []nft.Field{nft.FieldDaddr, nft.FieldL4Proto, nft.FieldDport}

// slots returns endpoint map elements of the frontend svcIP tcp/80, one per pod, on port 8080.
func slots(pods ...netip.Addr) []nft.Element {
	var out []nft.Element
	for i, p := range pods {
		out = append(out, nft.Element{Set: "endpoints",
			Key:  []nft.Value{nft.Addr(svcIP), nft.Proto(unix.IPPROTO_TCP), nft.Port(80), nft.Int(uint32(i))},
			Data: []nft.Value{nft.Addr(p), nft.Port(8080)}})
	}
	return out
}

// miniRuleset is a small kube-proxy-like table: a verdict map on the service address that jumps
// to a chain dispatching through the shared endpoint map with numgen, masquerading traffic from
// outside 198.18.128.0/17 through a mark; TCP to other ports of the service address is reset.
// Chains are listed out of priority order on purpose: the tracer must order them itself.
func miniRuleset(modulus uint32, pods ...netip.Addr) *nft.Ruleset {
	pick := nft.DNATNumgen{Modulus: modulus, Map: "endpoints", WithPort: true, Key: frontKey}
	return &nft.Ruleset{
		Chains: []nft.Chain{
			base("nat-postrouting", nft.ChainTypeNAT, nft.HookPostrouting, 100),
			base("filter-output-late", nft.ChainTypeFilter, nft.HookOutput, -90),
			base("nat-output", nft.ChainTypeNAT, nft.HookOutput, -100),
			base("nat-prerouting", nft.ChainTypeNAT, nft.HookPrerouting, -100),
			base("filter-forward", nft.ChainTypeFilter, nft.HookForward, -110),
			{Name: "services"}, {Name: "svc-web"}, {Name: "mark-masq"},
		},
		Sets: []nft.Set{
			{Name: "service-ips", Key: []nft.Type{nft.TypeIPv4Addr, nft.TypeInetProto, nft.TypeInetService}, Data: []nft.Type{nft.TypeVerdict}},
			{Name: "endpoints", Key: []nft.Type{nft.TypeIPv4Addr, nft.TypeInetProto, nft.TypeInetService, nft.TypeInteger}, Data: []nft.Type{nft.TypeIPv4Addr, nft.TypeInetService}, NumgenKey: 1},
		},
		Elements: map[string][]nft.Element{
			"service-ips": {{Set: "service-ips", Key: []nft.Value{nft.Addr(svcIP), nft.Proto(unix.IPPROTO_TCP), nft.Port(80)},
				Verdict: &nft.Verdict{Kind: nft.VerdictGoto, Chain: "svc-web"}}},
			"endpoints": slots(pods...),
		},
		Rules: []nft.Rule{
			rule("nat-prerouting", to(nft.VerdictJump, "services")),
			rule("nat-output", to(nft.VerdictJump, "services")),
			rule("services", nft.VMap{Fields: frontKey, Map: "service-ips"}),
			rule("svc-web", nft.CmpPrefix{Field: nft.FieldSaddr, Neg: true, Prefix: netip.MustParsePrefix("198.18.128.0/17")}, to(nft.VerdictJump, "mark-masq")),
			rule("svc-web", pick),
			rule("mark-masq", nft.MarkOr{Bits: masqBit}),
			// After DNAT in output a packet still addressed to the service address hit no port.
			rule("filter-output-late", nft.CtStatus{Mask: nft.CtStatusDNAT}, to(nft.VerdictAccept, "")),
			rule("filter-output-late", nft.Cmp{Field: nft.FieldDaddr, Value: nft.Addr(svcIP)}, nft.Cmp{Field: nft.FieldL4Proto, Value: nft.Proto(unix.IPPROTO_TCP)}, nft.Reject{TCPReset: true}),
			rule("filter-forward", nft.Cmp{Field: nft.FieldDaddr, Value: nft.Addr(svcIP)}, nft.Reject{}),
			rule("nat-postrouting", nft.MarkTest{Mask: masqBit, NonZero: true}, nft.Masquerade{}),
		},
	}
}

func local(p Packet) Packet { p.Local = true; return p }

func TestRun(t *testing.T) {
	tr := New(miniRuleset(3, pod1, pod2, pod3), node)
	all := []string{"198.18.128.10:8080", "198.18.128.11:8080", "198.18.128.12:8080"}
	for _, c := range []struct {
		name string
		p    Packet
		want Outcome
	}{
		{"pod to the service: every endpoint, source kept", TCP(pod1, svcIP, 80), Outcome{Accept, all, false}},
		{"outside client: masqueraded through the mark", TCP(client, svcIP, 80), Outcome{Accept, all, true}},
		{"the node itself: output path, masqueraded", local(TCP(node, svcIP, 80)), Outcome{Accept, all, true}},
		{"undefined port, forwarded: ICMP reject", TCP(client, svcIP, 81), Outcome{RejectICMP, nil, false}},
		{"undefined port from the node: reset after DNAT priority", local(TCP(node, svcIP, 81)), Outcome{RejectTCPReset, nil, false}},
		{"UDP to the service port: no vmap hit, rejected", UDP(pod1, svcIP, 80), Outcome{RejectICMP, nil, false}},
		{"other address: untouched", TCP(client, pod2, 22), Outcome{Accept, nil, false}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := tr.Run(c.p)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != c.want.String() {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}

// TestInputSkipsForwardAndPostrouting: a packet to a node address is delivered (input hook), so a
// forward chain that would drop it and a postrouting masquerade do not apply; a drop policy on
// the input chain is the verdict when no rule accepts.
func TestInputSkipsForwardAndPostrouting(t *testing.T) {
	rs := miniRuleset(1, pod1)
	rs.Chains = append(rs.Chains, nft.Chain{Name: "filter-input", Base: &nft.BaseChain{Type: nft.ChainTypeFilter, Hook: nft.HookInput, Priority: 0, Policy: nft.PolicyDrop}})
	rs.Rules = append(rs.Rules, rule("filter-input", nft.Cmp{Field: nft.FieldDport, Value: nft.Port(22)}, to(nft.VerdictAccept, "")),
		rule("filter-forward", to(nft.VerdictDrop, "")), rule("nat-postrouting", nft.Masquerade{}))
	tr := New(rs, node)
	for _, c := range []struct {
		p    Packet
		want Verdict
	}{{TCP(client, node, 22), Accept}, {TCP(client, node, 23), Drop}, {TCP(client, pod2, 22), Drop}} {
		if got, err := tr.Run(c.p); err != nil || got.Verdict != c.want || got.Masquerade {
			t.Errorf("%+v: got %s, %v; want %s, not masqueraded", c.p, got, err, c.want)
		}
	}
}

// TestJumpReturnsToTheNextRule: after a jumped-to chain falls off its end, evaluation goes on at
// the rule after the jump, never at the expression after it (a verdict ends its rule).
func TestJumpReturnsToTheNextRule(t *testing.T) {
	rs := &nft.Ruleset{
		Chains: []nft.Chain{base("fwd", nft.ChainTypeFilter, nft.HookForward, 0), {Name: "empty"}, {Name: "ret"}},
		Rules: []nft.Rule{
			rule("fwd", to(nft.VerdictJump, "empty"), to(nft.VerdictDrop, "")),
			rule("fwd", to(nft.VerdictJump, "ret")),
			rule("fwd", nft.Reject{TCPReset: true}),
			rule("ret", to(nft.VerdictReturn, "")),
			rule("ret", to(nft.VerdictAccept, "")),
		},
	}
	got, err := New(rs, node).Run(TCP(client, pod1, 80))
	if err != nil || got.Verdict != RejectTCPReset {
		t.Fatalf("got %s, %v; want %s", got, err, RejectTCPReset)
	}
}

func TestSpread(t *testing.T) {
	tr := New(miniRuleset(3, pod1, pod2, pod3), node)
	got, err := tr.Spread(TCP(pod1, svcIP, 80))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("spread %v, want three destinations", got)
	}
	for d, p := range got {
		if math.Abs(p-1.0/3) > 1e-9 {
			t.Errorf("%s with probability %.4f, want 1/3", d, p)
		}
	}
	if _, err := tr.Spread(TCP(client, svcIP, 81)); err == nil {
		t.Error("Spread of a rejected packet: no error, want one (no destination to weigh)")
	}
}

// TestBrokenRulesetsAreErrors: what the kernel would run wrongly (a modulus that does not match
// the slots) or refuse (a jump to a missing chain) is an *Error naming the packet, not a trace.
func TestBrokenRulesetsAreErrors(t *testing.T) {
	missing := miniRuleset(1, pod1)
	missing.Rules = append(missing.Rules, rule("filter-forward", to(nft.VerdictJump, "nowhere")))
	for _, c := range []struct {
		name string
		rs   *nft.Ruleset
		want string
	}{
		{"a modulus past the slots (a stale or missing endpoint)", miniRuleset(3, pod1, pod2), "holds 2 slots"},
		{"a modulus below the slots (an endpoint never picked)", miniRuleset(1, pod1, pod2), "holds 2 slots"},
		{"a jump to a missing chain", missing, `chain "nowhere"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.rs, node).Run(TCP(client, svcIP, 80))
			var te *Error
			if !errors.As(err, &te) || !strings.Contains(err.Error(), c.want) || te.Packet.Daddr != svcIP {
				t.Fatalf("err %v, want a trace *Error about %q", err, c.want)
			}
		})
	}
}

// TestConnectKeepsAffinity: an update of a dynamic set on the packet path is seen by the next
// packet of Connect (not of Run, which records nothing), and Expire forgets it.
func TestConnectKeepsAffinity(t *testing.T) {
	rs := miniRuleset(2, pod1, pod2)
	rs.Chains = append(rs.Chains, nft.Chain{Name: "aff-1"})
	rs.Sets = append(rs.Sets, nft.Set{Name: "aff-1", Key: []nft.Type{nft.TypeIPv4Addr}, Dynamic: true, Timeout: time.Minute})
	// svc-web: a client in aff-1 goes to pod2; else the numgen pick, and a pick of pod2 records it.
	rs.Rules = slices.Insert(rs.Rules, 4,
		rule("svc-web", nft.CmpSet{Fields: []nft.Field{nft.FieldSaddr}, Set: "aff-1"}, nft.DNAT{Addr: pod2, Port: 8080}))
	rs.Rules = append(rs.Rules, rule("nat-postrouting", nft.Cmp{Field: nft.FieldDaddr, Value: nft.Addr(pod2)}, nft.SetUpdate{Fields: []nft.Field{nft.FieldSaddr}, Set: "aff-1"}))
	// A pod client: for a masqueraded one the update would sit after masquerade's verdict.
	tr := New(rs, node)
	both := []string{"198.18.128.10:8080", "198.18.128.11:8080"}
	if got, _ := tr.Run(TCP(pod3, svcIP, 80)); !slices.Equal(got.DNAT, both) {
		t.Fatalf("before any connection: %v, want %v", got.DNAT, both)
	}
	if got, err := tr.Connect(TCP(pod3, svcIP, 80), func(uint32) uint32 { return 1 }); err != nil || !slices.Equal(got.DNAT, both[1:]) {
		t.Fatalf("connect with draw 1: %s, %v; want %v", got, err, both[1:])
	}
	if got, _ := tr.Run(TCP(pod3, svcIP, 80)); !slices.Equal(got.DNAT, both[1:]) {
		t.Errorf("after a connection to pod2: %v, want only %v (sticky)", got.DNAT, both[1:])
	}
	tr.Expire()
	if got, _ := tr.Run(TCP(pod3, svcIP, 80)); !slices.Equal(got.DNAT, both) {
		t.Errorf("after Expire: %v, want %v", got.DNAT, both)
	}
	if _, err := tr.Connect(TCP(pod3, svcIP, 80), func(m uint32) uint32 { return m }); err == nil {
		t.Error("a pick past the modulus: no error")
	}
}

// TestPath: the steps of one packet name the base chains in hook order, the map element that
// dispatched it (with its comment), and each rule that acted, in the order they acted; a
// rejected packet ends with the reject.
func TestPath(t *testing.T) {
	rs := miniRuleset(2, pod1, pod2)
	rs.Elements["service-ips"][0].Comment = "default/web/tcp/http"
	tr := New(rs, node)
	out, steps, err := tr.Path(TCP(client, svcIP, 80))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range steps {
		got = append(got, s.String())
	}
	want := []string{
		"nat-prerouting (hook prerouting)",
		"nat-prerouting #0: [jump services]",
		`services #0: [vmap @service-ips: goto svc-web] [@service-ips element "default/web/tcp/http"]`,
		"svc-web #0: [jump mark-masq]",
		"mark-masq #0: [meta mark |= 0x4000]",
		"svc-web #1: [dnat to 198.18.128.10:8080]",
		"filter-forward (hook forward)",
		"nat-postrouting (hook postrouting)",
		"nat-postrouting #0: [masquerade]",
	}
	if !slices.Equal(got, want) || out.Verdict != Accept || !out.Masquerade {
		t.Fatalf("path %s:\n%s\nwant:\n%s", out, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	out, steps, err = tr.Path(TCP(client, svcIP, 81))
	if err != nil || out.Verdict != RejectICMP || steps[len(steps)-1].String() != "filter-forward #0: [reject-icmp]" {
		t.Fatalf("rejected packet: %s, %v, last step %v; want reject-icmp by filter-forward #0", out, err, steps[len(steps)-1])
	}
}

// TestConnectRecordsAfterDNAT: the endpoint a connection was DNATed to is recorded after DNAT,
// from the connection's tuples (a verdict map of sticky frontends on the original destination,
// the endpoint from the reply source), and the next connection of that client goes back to it
// through the hit in the nat chain; another client still picks among all.
func TestConnectRecordsAfterDNAT(t *testing.T) {
	rs := miniRuleset(2, pod1, pod2)
	affKey := []nft.Field{nft.FieldSaddr, nft.FieldDaddr, nft.FieldL4Proto, nft.FieldDport}
	recKey := []nft.Field{nft.FieldSaddr, nft.FieldCtOrigDaddr, nft.FieldL4Proto, nft.FieldCtOrigProtoDst}
	front := []nft.Field{nft.FieldCtOrigDaddr, nft.FieldL4Proto, nft.FieldCtOrigProtoDst}
	tcp := nft.Cmp{Field: nft.FieldL4Proto, Value: nft.Proto(unix.IPPROTO_TCP)}
	rs.Chains = append(rs.Chains, base("filter-forward-record", nft.ChainTypeFilter, nft.HookForward, 0), nft.Chain{Name: "record"})
	rs.Sets = append(rs.Sets,
		nft.Set{Name: "affinity", Key: []nft.Type{nft.TypeIPv4Addr, nft.TypeIPv4Addr, nft.TypeInetProto, nft.TypeInetService},
			Data: []nft.Type{nft.TypeIPv4Addr, nft.TypeInetService}, Dynamic: true, HasTimeout: true},
		nft.Set{Name: "sticky", Key: []nft.Type{nft.TypeIPv4Addr, nft.TypeInetProto, nft.TypeInetService}, Data: []nft.Type{nft.TypeVerdict}})
	rs.Elements["sticky"] = []nft.Element{{Set: "sticky", Key: []nft.Value{nft.Addr(svcIP), nft.Proto(unix.IPPROTO_TCP), nft.Port(80)},
		Verdict: &nft.Verdict{Kind: nft.VerdictGoto, Chain: "record"}}}
	at := slices.IndexFunc(rs.Rules, func(r nft.Rule) bool { return r.Chain == "svc-web" })
	rs.Rules = slices.Insert(rs.Rules, at, rule("svc-web", nft.DNATMap{Fields: affKey, Map: "affinity", WithPort: true}))
	rs.Rules = append(rs.Rules,
		rule("filter-forward-record", tcp, nft.VMap{Fields: front, Map: "sticky"}),
		rule("record", nft.CtState{Mask: nft.CtStateNew}, tcp,
			nft.SetUpdate{Fields: recKey, Set: "affinity", Timeout: time.Hour, DataFields: []nft.Field{nft.FieldCtReplySaddr, nft.FieldCtReplyProtoSrc}}))
	tr := New(rs, node)
	both := []string{"198.18.128.10:8080", "198.18.128.11:8080"}
	if got, err := tr.Connect(TCP(pod3, svcIP, 80), func(uint32) uint32 { return 1 }); err != nil || !slices.Equal(got.DNAT, both[1:]) {
		t.Fatalf("connect with draw 1: %s, %v; want %v", got, err, both[1:])
	}
	if got, _ := tr.Run(TCP(pod3, svcIP, 80)); !slices.Equal(got.DNAT, both[1:]) {
		t.Errorf("after a connection to pod2: %v, want only %v (recorded after DNAT)", got.DNAT, both[1:])
	}
	if got, _ := tr.Run(TCP(client, svcIP, 80)); !slices.Equal(got.DNAT, both) {
		t.Errorf("another client: %v, want %v", got.DNAT, both)
	}
	if got, _ := tr.Run(TCP(pod3, svcIP, 81)); got.Verdict == Accept && len(got.DNAT) > 0 {
		t.Errorf("another port of the frontend: %s, want no DNAT", got)
	}
}

// TestSocketLookupAndRedirect: a socket lookup stops its rule when the node holds no socket for
// the packet, reads the found socket otherwise, and at output meets the sending socket (bound to
// its source, not transparent) whoever listens; a redirect sends the packet to the node itself,
// over loopback at output.
func TestSocketLookupAndRedirect(t *testing.T) {
	held := []nft.Expr{nft.Cmp{Field: nft.FieldDport, Value: nft.Port(32000)}}
	rs := &nft.Ruleset{
		Chains: []nft.Chain{base("pre", nft.ChainTypeNAT, nft.HookPrerouting, -101), base("out", nft.ChainTypeNAT, nft.HookOutput, -101)},
		Rules: []nft.Rule{
			rule("pre", append(slices.Clone(held), nft.SocketMatch{Key: nft.SocketWildcard}, to(nft.VerdictReturn, ""))...),
			rule("pre", append(slices.Clone(held), nft.SocketMatch{Key: nft.SocketWildcard, Value: true}, to(nft.VerdictReturn, ""))...),
			rule("pre", append(slices.Clone(held), nft.Cmp{Field: nft.FieldL4Proto, Value: nft.Proto(unix.IPPROTO_TCP)}, nft.Redirect{Port: 10253})...),
			rule("out", append(slices.Clone(held), nft.SocketMatch{Key: nft.SocketWildcard}, to(nft.VerdictReturn, ""))...),
			rule("out", append(slices.Clone(held), nft.Cmp{Field: nft.FieldL4Proto, Value: nft.Proto(unix.IPPROTO_TCP)}, nft.Redirect{Port: 10253})...),
		},
	}
	tr := New(rs, node)
	local := TCP(node, node, 32000)
	local.Local = true
	for _, c := range []struct {
		name string
		p    Packet
		sk   *Socket
		want []string
	}{
		{"no socket: redirected", TCP(client, node, 32000), nil, []string{"198.18.1.1:10253"}},
		{"a listener on the wildcard address keeps it", TCP(client, node, 32000), &Socket{Wildcard: true}, nil},
		{"a listener on the address keeps it", TCP(client, node, 32000), &Socket{}, nil},
		{"output meets the sending socket", local, &Socket{Wildcard: true}, nil},
		{"another port", TCP(client, node, 32001), nil, nil},
	} {
		c.p.Socket = c.sk
		got, err := tr.Run(c.p)
		if err != nil || got.Verdict != Accept || !slices.Equal(got.DNAT, c.want) {
			t.Errorf("%s: got %s, %v; want accept, dnat %v", c.name, got, err, c.want)
		}
	}
	// Without the socket rule at output, the node's own packet is redirected over loopback.
	rs.Rules = slices.Delete(rs.Rules, 3, 4)
	got, err := New(rs, node).Run(local)
	if want := []string{"127.0.0.1:10253"}; err != nil || !slices.Equal(got.DNAT, want) {
		t.Errorf("output redirect: got %s, %v; want dnat %v", got, err, want)
	}
}
