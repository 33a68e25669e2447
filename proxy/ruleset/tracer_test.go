package ruleset

import (
	"net/netip"
	"testing"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/nft/trace"
)

// The tests here trace packets through the builder's rulesets with nft/trace; these are the
// short forms they use. A trace the tracer cannot follow fails the test.

type packet = trace.Packet

// outcome is trace.Outcome with short field names, so that a case reads
// outcome{"accept", dnat, masquerade}.
type outcome struct {
	verdict    string
	dnat       []string
	masquerade bool
}

func (o outcome) String() string {
	return trace.Outcome{Verdict: trace.Verdict(o.verdict), DNAT: o.dnat, Masquerade: o.masquerade}.String()
}

func short(o trace.Outcome) outcome { return outcome{string(o.Verdict), o.DNAT, o.Masquerade} }

// tracer is a trace.Tracer that fails its test instead of returning errors.
type tracer struct {
	t *testing.T
	*trace.Tracer
}

func newTracer(t *testing.T, rs *nft.Ruleset, nodeAddrs ...string) *tracer {
	return &tracer{t: t, Tracer: trace.New(rs, addrs(nodeAddrs...)...)}
}

func (tr *tracer) run(p packet) outcome {
	tr.t.Helper()
	o, err := tr.Run(p)
	if err != nil {
		tr.t.Fatal(err)
	}
	return short(o)
}

func (tr *tracer) connect(p packet, pick func(mod uint32) uint32) outcome {
	tr.t.Helper()
	o, err := tr.Connect(p, pick)
	if err != nil {
		tr.t.Fatal(err)
	}
	return short(o)
}

func (tr *tracer) spread(p packet) map[string]float64 {
	tr.t.Helper()
	s, err := tr.Spread(p)
	if err != nil {
		tr.t.Fatal(err)
	}
	return s
}

func (tr *tracer) expire() { tr.Expire() }

func tcp(saddr, daddr string, port uint16) packet {
	return trace.TCP(netip.MustParseAddr(saddr), netip.MustParseAddr(daddr), port)
}

func udp(saddr, daddr string, port uint16) packet {
	return trace.UDP(netip.MustParseAddr(saddr), netip.MustParseAddr(daddr), port)
}
