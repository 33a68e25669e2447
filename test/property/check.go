package property

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/allocator/policy"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// Kernel limits on what nftproxy derives from user strings. Names: NFT_NAME_MAXLEN (256 bytes
// with the NUL) for tables, chains and sets. Comments: nft's NFTNL_UDATA_COMMENT_MAXLEN (128
// bytes with the NUL); nft refuses longer ones when it reads a ruleset back. Both must be valid
// UTF-8 without NUL, or nft cannot print and re-read them.
const (
	maxNameBytes    = 255
	maxCommentBytes = 127
)

// Cluster shape shared by the pure and kernel paths: the lab's address plan with a /17 cluster
// CIDR (generated pods live anywhere in it).
var (
	clusterCIDRs = []netip.Prefix{netip.MustParsePrefix("198.18.128.0/17"), netip.MustParsePrefix("fd00:128::/64")}
	serviceCIDRs = []netip.Prefix{netip.MustParsePrefix("198.19.0.0/18"), netip.MustParsePrefix("fd00:19::/112")}
)

// newBuilders returns the IPv4 and IPv6 builders with the daemon's defaults (marks 0x4000 and
// 0x8000), as `nftproxy run` and `render` build them.
func newBuilders(nodeName string) ([]*ruleset.Builder, error) {
	var out []*ruleset.Builder
	for _, f := range []nft.Family{nft.IPv4, nft.IPv6} {
		b, err := ruleset.NewBuilder(ruleset.Config{Family: f, MasqueradeMark: 0x4000, DropMark: 0x8000,
			ClusterCIDRs: clusterCIDRs, ServiceCIDRs: serviceCIDRs, NodeName: nodeName})
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// newTracker is the model as the daemon builds it for this node, with the node-address guard's
// defaults (--reserved-ports, --range-node-port-range).
func newTracker(nodeName string) *model.Tracker {
	reserved, err := model.ParsePortSpans(model.DefaultReservedPorts)
	if err != nil {
		panic(err) // a constant
	}
	blocks, err := allocator.ParseRange(policy.DefaultBlockRange)
	if err != nil {
		panic(err) // a constant
	}
	guard := model.GuardConfig{ReservedPorts: reserved,
		BlockRange: model.PortSpan{First: uint16(blocks.First), Last: uint16(blocks.Last)}}
	return model.NewTracker(model.TrackerConfig{NodeName: nodeName, Logger: logr.Discard(), Guard: guard})
}

// feed hands a batch to the tracker: the node, then every Service and slice.
func feed(tr *model.Tracker, b *Batch) {
	tr.UpsertNode(b.Node)
	for _, gs := range b.Services {
		tr.UpsertService(gs.Service)
		for _, s := range gs.Slices {
			tr.UpsertEndpointSlice(s)
		}
	}
}

// unfeed removes a batch's Services and slices (the node stays).
func unfeed(tr *model.Tracker, b *Batch) {
	for _, gs := range b.Services {
		tr.DeleteService(gs.Key())
		for _, s := range gs.Slices {
			tr.DeleteEndpointSlice(s.Namespace, s.Name)
		}
	}
}

// Failure is one violated property, owned by a Service when one can be named.
type Failure struct {
	Service model.ServiceKey // zero: the batch as a whole
	What    string
}

func (f Failure) String() string {
	if f.Service == (model.ServiceKey{}) {
		return "batch: " + f.What
	}
	return f.Service.String() + ": " + f.What
}

// checkOutcomes compares every generated Service's model with what the property requires:
// programmed, rejected (with the reason, and a documented one), or ignored.
func checkOutcomes(b *Batch, snap model.Snapshot) []Failure {
	reasons := model.AllReasons()
	var out []Failure
	for _, gs := range b.Services {
		key := gs.Key()
		s := snap.Services[key]
		fail := func(format string, args ...any) {
			out = append(out, Failure{key, fmt.Sprintf("want %v, got %s", gs.Expect, fmt.Sprintf(format, args...))})
		}
		if s != nil && s.Rejected != nil && !slices.Contains(reasons, s.Rejected.Reason) {
			fail("rejection reason %q, which is not in model.AllReasons()", s.Rejected.Reason)
			continue
		}
		switch gs.Expect.Outcome {
		case Ignored:
			if s != nil {
				fail("a model (rejected: %v)", s.Rejected)
			}
		case Programmed:
			switch {
			case s == nil:
				fail("no model (ignored)")
			case s.Rejected != nil:
				fail("rejected: %s: %s", s.Rejected.Reason, s.Rejected.Message)
			case len(s.Ports) == 0:
				fail("accepted with no ports")
			}
		case Rejected:
			switch {
			case s == nil:
				fail("no model (ignored)")
			case s.Rejected == nil:
				fail("accepted with %d ports", len(s.Ports))
			case gs.Expect.Reason != "" && s.Rejected.Reason != gs.Expect.Reason:
				fail("rejected: %s: %s", s.Rejected.Reason, s.Rejected.Message)
			}
		case Either:
			if s == nil {
				fail("no model (ignored)")
			}
		}
	}
	return out
}

// checkFragments builds every accepted Service's fragment in each family and checks that what
// it derives from user strings fits the kernel's limits, and that a port with a ready local
// endpoint reaches its endpoints (never the no-endpoint reject).
func checkFragments(b *Batch, builders []*ruleset.Builder, snap model.Snapshot) []Failure {
	var out []Failure
	byKey := map[model.ServiceKey]*Generated{}
	for _, gs := range b.Services {
		byKey[gs.Key()] = gs
	}
	for _, bl := range builders {
		fam := "4"
		if bl.Family() == nft.IPv6 {
			fam = "6"
		}
		for _, msg := range fragmentLimits(bl.Base(snap.Node)) {
			out = append(out, Failure{What: "base layout: " + msg})
		}
		for _, s := range snap.Sorted() {
			f := bl.Service(snap.Node, s)
			for _, msg := range fragmentLimits(f) {
				out = append(out, Failure{s.Key, fmt.Sprintf("family %s: %s", bl.Family(), msg)})
			}
			gs := byKey[s.Key]
			if gs == nil || s.Rejected != nil {
				continue
			}
			for _, sp := range gs.Serving {
				if sp.Family == fam && !reachesEndpoints(f, s, sp.Name) {
					out = append(out, Failure{s.Key, fmt.Sprintf("family %s: port %s has a ready endpoint on this node but neither an endpoint chain (%s) nor slots in %s: its traffic is rejected",
						bl.Family(), sp.Name, ruleset.ServiceChain(sp.Name), ruleset.MapEndpoints+"-*")})
				}
			}
		}
	}
	return out
}

// reachesEndpoints reports whether the ClusterIPs of port pn of s reach endpoints in fragment f:
// through chains of its own (own-chains mode), or through slots under a ClusterIP key in the
// shared endpoint maps (shared mode).
func reachesEndpoints(f fragment.Fragment, s *model.Service, pn model.PortName) bool {
	for _, c := range f.Chains {
		if c.Chain.Name == ruleset.ServiceChain(pn) || c.Chain.Name == ruleset.LocalChain(pn) {
			return true
		}
	}
	i := slices.IndexFunc(s.Ports, func(sp model.ServicePort) bool { return sp.Name == pn })
	if i < 0 {
		return false
	}
	sp := &s.Ports[i]
	for _, e := range f.Elements {
		if !ruleset.IsEndpointMap(e.Set, ruleset.MapEndpoints) || len(e.Key) != 4 || e.Key[2].Num != uint32(sp.Port) || e.Key[1].Num != protoNumber(pn.Protocol) {
			continue
		}
		if slices.ContainsFunc(sp.ClusterIPs, func(a netip.Addr) bool { return a.Unmap() == e.Key[0].Addr }) {
			return true
		}
	}
	return false
}

// protoNumber is the IP protocol number of p.
func protoNumber(p model.Protocol) uint32 {
	switch p {
	case model.TCP:
		return unix.IPPROTO_TCP
	case model.UDP:
		return unix.IPPROTO_UDP
	case model.SCTP:
		return unix.IPPROTO_SCTP
	}
	return 0
}

// fragmentLimits lists the names and comments of f that the kernel or nft would refuse.
func fragmentLimits(f fragment.Fragment) []string {
	var out []string
	name := func(what, n string) {
		if len(n) > maxNameBytes || !utf8.ValidString(n) || strings.ContainsRune(n, 0) || n == "" {
			out = append(out, fmt.Sprintf("%s name %q (%d bytes): want 1..%d bytes of valid UTF-8", what, n, len(n), maxNameBytes))
		}
	}
	comment := func(what, c string) {
		if len(c) > maxCommentBytes || !utf8.ValidString(c) || strings.ContainsRune(c, 0) {
			out = append(out, fmt.Sprintf("%s comment %q (%d bytes): want at most %d bytes of valid UTF-8", what, c, len(c), maxCommentBytes))
		}
	}
	for _, c := range f.Chains {
		name("chain", c.Chain.Name)
		for _, r := range c.Rules {
			comment("rule in chain "+c.Chain.Name, r.Comment)
			for _, x := range r.Exprs {
				if v, ok := x.(nft.Verdict); ok && v.Chain != "" {
					name("verdict target", v.Chain)
				}
			}
		}
	}
	for _, s := range f.Sets {
		name("set", s.Name)
		comment("set "+s.Name, s.Comment)
	}
	for _, e := range f.Elements {
		comment("element of "+e.Set, e.Comment)
	}
	return out
}

// checkNodeSafety reads a ruleset (desired, or the kernel's) for what no Service may do to the
// node: all-ports on a node address, a range or port on a node address or a node port that
// covers a reserved port, in a dispatch map or a no-endpoint (reject) map. The element comment
// names the Service port.
func checkNodeSafety(rs *nft.Ruleset, nodeIPs []netip.Addr) []Failure {
	node := map[netip.Addr]bool{}
	for _, a := range nodeIPs {
		node[a] = true
	}
	covers := func(lo, hi uint32) (uint16, bool) {
		for _, p := range ReservedPorts {
			if uint32(p) >= lo && uint32(p) <= hi {
				return p, true
			}
		}
		return 0, false
	}
	var out []Failure
	names := make([]string, 0, len(rs.Elements))
	for n := range rs.Elements {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, set := range names {
		for _, e := range rs.Elements[set] {
			owner := ownerOf(e.Comment)
			switch set {
			case ruleset.MapServiceAllPorts, ruleset.MapNoEndpointAllPorts:
				if len(e.Key) > 0 && node[e.Key[0].Addr] {
					out = append(out, Failure{owner, fmt.Sprintf("%s holds %s on node address %s: every port of the node is taken", set, e.Comment, e.Key[0].Addr)})
				}
			case ruleset.MapServiceIPs, ruleset.MapServiceRanges, ruleset.MapNoEndpointServices:
				if len(e.Key) < 3 || !node[e.Key[0].Addr] {
					continue
				}
				lo, hi := e.Key[2].Num, e.Key[2].Num
				if len(e.KeyEnd) == 3 {
					hi = e.KeyEnd[2].Num
				}
				if p, ok := covers(lo, hi); ok {
					out = append(out, Failure{owner, fmt.Sprintf("%s holds %s on node address %s ports %d-%d: reserved port %d is taken", set, e.Comment, e.Key[0].Addr, lo, hi, p)})
				}
			case ruleset.MapNodePorts, ruleset.MapNodePortRanges, ruleset.MapNoEndpointNodePorts:
				if len(e.Key) < 2 {
					continue
				}
				lo, hi := e.Key[1].Num, e.Key[1].Num
				if len(e.KeyEnd) == 2 {
					hi = e.KeyEnd[1].Num
				}
				if p, ok := covers(lo, hi); ok {
					out = append(out, Failure{owner, fmt.Sprintf("%s holds %s on node ports %d-%d: reserved port %d is taken on every node address", set, e.Comment, lo, hi, p)})
				}
			}
		}
	}
	return out
}

// ownerOf reads the Service key from an element comment "ns/name/proto/port".
func ownerOf(comment string) model.ServiceKey {
	parts := strings.SplitN(comment, "/", 3)
	if len(parts) < 3 {
		return model.ServiceKey{}
	}
	return model.ServiceKey{Namespace: parts[0], Name: parts[1]}
}
