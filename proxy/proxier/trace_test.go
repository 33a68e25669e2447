package proxier

import (
	"context"
	"math"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/nft/trace"
	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
)

// The tests here trace packets through what the kernel holds after partial syncs, as upstream
// kube-proxy's tests trace after a real sync: not what the builder would write, but what the
// reconciler's ops left in the table (shared maps included). Address plan of this package, plus
// the node's address 198.18.1.1, an outside client 198.18.1.2 and the pod CIDR 198.18.128.0/17.
var (
	traceNode   = netip.MustParseAddr("198.18.1.1")
	traceClient = netip.MustParseAddr("198.18.1.2")
	tracePod    = netip.MustParseAddr("198.18.128.200")
)

// nodePortService is service(name, ip) of type NodePort on nodePort.
func nodePortService(name, ip string, nodePort int32) *corev1.Service {
	s := service(name, ip)
	s.Spec.Type = corev1.ServiceTypeNodePort
	s.Spec.Ports[0].NodePort = nodePort
	return s
}

// tracedProxier is a Proxier whose builder knows the pod and Service CIDRs (so a pod is not
// masqueraded and a removed ClusterIP is dropped), on node n1 at 198.18.1.1.
func tracedProxier(t *testing.T, k nft.Interface, tr *model.Tracker) *Proxier {
	b, err := ruleset.NewBuilder(ruleset.Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000,
		ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("198.18.128.0/17")},
		ServiceCIDRs: []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16")}})
	if err != nil {
		t.Fatal(err)
	}
	tr.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: traceNode.String()}}}})
	return New(tr, k, []*ruleset.Builder{b}, nil, logr.Discard(), time.Now)
}

// frontends are the ways into one Service the tests trace: its ClusterIP from a pod (not
// masqueraded) and its node port from an outside client (masqueraded).
type frontends struct {
	clusterIP string
	nodePort  uint16
}

// eps are destinations "addr:8080".
func eps(addrs ...string) []string {
	var out []string
	for _, a := range addrs {
		out = append(out, a+":8080")
	}
	return out
}

// reaches checks, on the table read back from k, that both frontends of f send new connections
// to exactly want, evenly, with the right masquerade.
func reaches(t *testing.T, k nft.Interface, f frontends, want []string) {
	t.Helper()
	tr := traceKernel(t, k)
	for _, c := range []struct {
		name string
		p    trace.Packet
		masq bool
	}{
		{"ClusterIP from a pod", trace.TCP(tracePod, netip.MustParseAddr(f.clusterIP), 80), false},
		{"node port from outside", trace.TCP(traceClient, traceNode, f.nodePort), true},
	} {
		got, err := tr.Run(c.p)
		if err != nil {
			t.Fatalf("%s %s: %v", f.clusterIP, c.name, err)
		}
		if w := (trace.Outcome{Verdict: trace.Accept, DNAT: want, Masquerade: c.masq}); got.String() != w.String() {
			t.Fatalf("%s %s: got %s, want %s", f.clusterIP, c.name, got, w)
		}
		spread, err := tr.Spread(c.p)
		if err != nil {
			t.Fatalf("%s %s: %v", f.clusterIP, c.name, err)
		}
		for _, d := range want {
			if p := spread[d]; math.Abs(p-1/float64(len(want))) > 1e-9 {
				t.Errorf("%s %s: %s with probability %.4f, want 1/%d (all: %v)", f.clusterIP, c.name, d, p, len(want), spread)
			}
		}
	}
}

func traceKernel(t *testing.T, k nft.Interface) *trace.Tracer {
	t.Helper()
	rs, err := k.Dump(context.Background(), table4)
	if err != nil {
		t.Fatal(err)
	}
	return trace.New(rs, traceNode)
}

// partialSync runs a Sync that must be partial (a full one would hide what partial ops leave).
func partialSync(t *testing.T, p *Proxier, what string) {
	t.Helper()
	res, err := p.Sync(context.Background(), false)
	if err != nil {
		t.Fatalf("%s: sync: %v", what, err)
	}
	if res.Full || res.Ops == 0 {
		t.Fatalf("%s: sync full=%v ops=%d, want a partial sync that sends ops", what, res.Full, res.Ops)
	}
}

// TestTraceAfterPartialSyncs: after an endpoint change (grow, then shrink to other endpoints), a
// new Service and a removal, each applied by a partial sync, a ClusterIP and a node port reach
// exactly the current endpoints of their Service, evenly; the removed Service's ClusterIP is
// dropped and its node port no longer DNATed; the untouched Service keeps its endpoints.
func TestTraceAfterPartialSyncs(t *testing.T) {
	kernels(t, func(t *testing.T, k nft.Interface) {
		tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard()})
		tr.UpsertService(nodePortService("web", "198.19.0.10", 30080))
		tr.UpsertEndpointSlice(slice("web", "198.18.128.10"))
		tr.UpsertService(nodePortService("db", "198.19.0.11", 30081))
		tr.UpsertEndpointSlice(slice("db", "198.18.128.20", "198.18.128.21"))
		p := tracedProxier(t, k, tr)
		if _, err := p.Sync(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		web, db := frontends{"198.19.0.10", 30080}, frontends{"198.19.0.11", 30081}
		reaches(t, k, web, eps("198.18.128.10"))
		reaches(t, k, db, eps("198.18.128.20", "198.18.128.21"))

		tr.UpsertEndpointSlice(slice("web", "198.18.128.11", "198.18.128.12", "198.18.128.13"))
		partialSync(t, p, "web grows")
		reaches(t, k, web, eps("198.18.128.11", "198.18.128.12", "198.18.128.13"))

		tr.UpsertEndpointSlice(slice("web", "198.18.128.14", "198.18.128.12"))
		partialSync(t, p, "web shrinks to other endpoints")
		reaches(t, k, web, eps("198.18.128.12", "198.18.128.14"))
		reaches(t, k, db, eps("198.18.128.20", "198.18.128.21"))

		tr.UpsertService(nodePortService("api", "198.19.0.12", 30082))
		tr.UpsertEndpointSlice(slice("api", "198.18.128.30", "198.18.128.31", "198.18.128.32", "198.18.128.33"))
		partialSync(t, p, "new Service api")
		reaches(t, k, frontends{"198.19.0.12", 30082}, eps("198.18.128.30", "198.18.128.31", "198.18.128.32", "198.18.128.33"))

		tr.DeleteService(model.ServiceKey{Namespace: "default", Name: "web"})
		tr.DeleteEndpointSlice("default", "web-abc")
		partialSync(t, p, "web removed")
		tc := traceKernel(t, k)
		for _, c := range []struct {
			name string
			p    trace.Packet
			want string
		}{
			{"removed ClusterIP: dropped", trace.TCP(tracePod, netip.MustParseAddr(web.clusterIP), 80), "drop dnat=[] masq=false"},
			{"removed node port: not DNATed", trace.TCP(traceClient, traceNode, web.nodePort), "accept dnat=[] masq=false"},
		} {
			got, err := tc.Run(c.p)
			if err != nil || got.String() != c.want {
				t.Errorf("%s: got %s, %v; want %s", c.name, got, err, c.want)
			}
		}
		reaches(t, k, db, eps("198.18.128.20", "198.18.128.21"))
		reaches(t, k, frontends{"198.19.0.12", 30082}, eps("198.18.128.30", "198.18.128.31", "198.18.128.32", "198.18.128.33"))
	})
}
