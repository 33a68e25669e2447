package ruleset

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/model"
)

// longService is the case: namespace team-a, a 63-character name (the API's limit), a
// 15-character port name (the API's limit), type NodePort, with affinity and source ranges so
// that every kind of name and comment is built.
func longService(ns, name, port string) *model.Service {
	return &model.Service{Key: model.ServiceKey{Namespace: ns, Name: name}, Ports: []model.ServicePort{{
		Name: pn(ns, name, port, model.TCP), Port: 80, PortEnd: 80, TargetPort: 8080, NodePort: 30080,
		ClusterIPs: addrs(webIP), LoadBalancerIPs: addrs(lbIP), ExternalTrafficLocal: true,
		LoadBalancerSourceRanges: []netip.Prefix{netip.MustParsePrefix("198.18.1.0/24")}, AffinityTimeout: 10 * time.Second,
		Endpoints: ready(8080, pod1, pod2),
	}}}
}

// strings63 is a 63-character DNS label.
var strings63 = "a" + strings.Repeat("b", 61) + "c"

// checkStrings fails the test for every name or comment of rs the kernel or nft would refuse or
// list differently.
func checkStrings(t *testing.T, rs *nft.Ruleset) {
	t.Helper()
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
		}
	}
	comment := func(c string) {
		t.Helper()
		check("comment "+c, nft.CheckComment(c))
		if !utf8.ValidString(c) || strings.ContainsAny(c, "\"\n\r") {
			t.Errorf("comment %q is not a string nft can hold", c)
		}
	}
	for _, c := range rs.Chains {
		check("chain "+c.Name, nft.CheckName(c.Name))
		// Render quotes a name nft cannot read back (and nft refuses quoted names).
		if strings.Contains(nft.Render(&nft.Ruleset{Table: rs.Table, Chains: []nft.Chain{c}}), `"`) {
			t.Errorf("chain name %q cannot be written as nft input", c.Name)
		}
	}
	for _, s := range rs.Sets {
		check("set "+s.Name, nft.CheckName(s.Name))
		comment(s.Comment)
	}
	for _, r := range rs.Rules {
		comment(r.Comment)
	}
	for _, els := range rs.Elements {
		for _, e := range els {
			comment(e.Comment)
		}
	}
}

func TestNamesAndCommentsFitKernelLimits(t *testing.T) {
	b := testBuilder(t, nil)
	tests := []struct{ name, ns, svc, port string }{
		{"issue: team-a, 63-character name, 15-character port", "team-a", strings63, "abcdefghijklm-o"},
		{"manifest mode: very long names", strings.Repeat("n", 300), strings.Repeat("s", 300), strings.Repeat("p", 300)},
		{"manifest mode: multi-byte characters across every cut", strings.Repeat("é", 150), strings.Repeat("日本", 60), "ポート"},
		{"manifest mode: NUL, quotes, control characters, invalid UTF-8", "a\x00b", "q\"u\no\rte\x7f", "p\xff\xfe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := b.Ruleset(testNode(), []*model.Service{longService(tt.ns, tt.svc, tt.port)})
			checkStrings(t, rs)
			// The fake refuses what the kernel layer refuses (over-long or NUL-holding strings).
			if _, err := nft.NewFake().Apply(context.Background(), addAll(rs)); err != nil {
				t.Fatalf("apply: %v", err)
			}
		})
	}
}

func TestNamesStayUniqueWhenCutOrSanitised(t *testing.T) {
	long := strings.Repeat("x", 300)
	pairs := [][2]model.PortName{
		{pn("ns", long+"a", "p", model.TCP), pn("ns", long+"b", "p", model.TCP)},                                 // differ after the cut
		{pn("ns", "a\x00b", "p", model.TCP), pn("ns", "a\x01b", "p", model.TCP)},                                 // sanitised alike
		{pn("ns", "é", "p", model.TCP), pn("ns", "è", "p", model.TCP)},                                           // non-ASCII alike
		{pn("a/b", "c", "p", model.TCP), pn("a", "b/c", "p", model.TCP)},                                         // '/' spelling alike
		{pn("ns", "svc", "a/b", model.TCP), pn("ns/svc", "a", "b", model.TCP)},                                   // '/' in a port name
		{pn("ns", strings.Repeat("日", 100), "p", model.TCP), pn("ns", strings.Repeat("本", 100), "p", model.TCP)}, // cut and sanitised
	}
	for _, p := range pairs {
		for _, f := range []func(model.PortName) string{ServiceChain, ExternalChain, LocalChain, FirewallChain, SourceRangesSet} {
			a, b := f(p[0]), f(p[1])
			if a == b {
				t.Errorf("%q and %q share the name %q", p[0], p[1], a)
			}
			if nft.CheckName(a) != nil || nft.CheckName(b) != nil {
				t.Errorf("invalid names %q %q", a, b)
			}
		}
		ep := netip.MustParseAddrPort("198.18.128.10:8080")
		if AffinitySet(p[0], ep) == AffinitySet(p[1], ep) {
			t.Errorf("%q and %q share the affinity set %q", p[0], p[1], AffinitySet(p[0], ep))
		}
	}
}

// TestNamesOfValidServicesUnchanged pins the names of API-valid Services: fitting names to the
// limits must not rename the chains of running clusters (every chain would be replaced once).
func TestNamesOfValidServicesUnchanged(t *testing.T) {
	p := pn("default", "web", "http", model.TCP)
	if got, want := ServiceChain(p), "svc-"+portHash(p)+"-default/web/tcp/http"; got != want {
		t.Errorf("ServiceChain = %q, want %q", got, want)
	}
	if got := portHash(p); got != hash("default/web/tcp/http") {
		t.Errorf("the hash of a valid port changed: %q", got)
	}
}

func TestCommentCutsOnCharacterBoundaryKeepingTheEnding(t *testing.T) {
	for n := 100; n < 140; n++ {
		name := strings.Repeat("a", n%3) + strings.Repeat("€", n) // 3-byte characters at every offset
		c := comment(name, ": 2 endpoints")
		if len(c) > nft.MaxCommentLen || !utf8.ValidString(c) || !strings.HasSuffix(c, "...: 2 endpoints") {
			t.Fatalf("comment(%d × €) = %q (%d bytes): want at most %d bytes, valid UTF-8, ending kept", n, c, len(c), nft.MaxCommentLen)
		}
	}
	if got := comment("default/web/tcp/http", ": 1 endpoint"); got != "default/web/tcp/http: 1 endpoint" {
		t.Errorf("a short comment changed: %q", got)
	}
}

// TestSharedChainNames pins the names of the shared chains (a rename replaces every one of them
// in running clusters) and checks they can never be taken for a Service's own chain, whose hash
// is upper-case base32.
func TestSharedChainNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{frontendKind{}.pickChain(false, 3), "pick-3-s0"},
		{frontendKind{shard: 7}.pickChain(true, 1), "pick-local-1-s7"},
		{frontendKind{nodePort: true, shard: 15}.pickChain(false, 3), "pick-nodeport-3-s15"},
		{frontendKind{nodePort: true, shard: 2}.pickChain(true, 2), "pick-local-nodeport-2-s2"},
		{frontendKind{shard: 3}.masqPickChain(3), "masq-pick-3-s3"},
		{frontendKind{nodePort: true, shard: 3}.masqPickChain(3), "masq-pick-nodeport-3-s3"},
		{frontendKind{shard: 1}.localOfChain(0, 2), "local-0-of-2-s1"},
		{frontendKind{nodePort: true, shard: 1}.localOfChain(1, 3), "local-nodeport-1-of-3-s1"},
		{frontendKind{shard: 4}.endpointMap(false), "endpoints-s4"},
		{frontendKind{nodePort: true, shard: 4}.endpointMap(true), "local-nodeport-endpoints-s4"},
	} {
		if c.got != c.want {
			t.Errorf("shared chain %q, want %q", c.got, c.want)
		}
		if nft.CheckName(c.got) != nil {
			t.Errorf("shared chain name %q is not a valid name", c.got)
		}
		if h := strings.SplitN(c.got, "-", 3); len(h) == 3 && len(h[1]) == hashLen && strings.ToUpper(h[1]) == h[1] {
			t.Errorf("shared chain %q reads like a Service's own chain (prefix-HASH-…)", c.got)
		}
	}
}

func TestCutTextKeepsWhatFits(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"abcdef", 3, "abc"},
		{"abcdef", 6, "abcdef"},
		{"ab€cd", 4, "ab"}, // € is bytes 2-4: cut before it, not inside
		{"ab€cd", 5, "ab€"},
	} {
		if got := cutText(c.in, c.n); got != c.want {
			t.Errorf("cutText(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}
