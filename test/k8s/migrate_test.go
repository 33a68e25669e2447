package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/proxy/kubeproxy"
	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
	"github.com/nftproxy/nftproxy/test/tier"
)

// foreignRules are another writer's rules in the node before kube-proxy starts: a table of its
// own, and (through iptables-nft, as an operator's own rules would be) a non-KUBE chain with a
// jump to it in filter and in nat. They must come out of the migration byte-identical.
const foreignTable = `
table inet site-firewall {
	set admins { type ipv4_addr; elements = { 198.18.0.9 } }
	chain input {
		type filter hook input priority 5; policy accept;
		ip saddr @admins tcp dport 22 accept
	}
}
`

var foreignIPTables = [][]string{
	{"-t", "filter", "-N", "SITE-SSH"},
	{"-t", "filter", "-A", "SITE-SSH", "-s", "198.18.0.9", "-j", "ACCEPT"},
	{"-t", "filter", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "SITE-SSH"},
	{"-t", "nat", "-N", "SITE-DNAT"},
	{"-t", "nat", "-A", "SITE-DNAT", "-p", "tcp", "-j", "DNAT", "--to-destination", "198.18.0.2:22"},
	{"-t", "nat", "-A", "PREROUTING", "-p", "tcp", "--dport", "2222", "-j", "SITE-DNAT"},
}

// TestMigrateFromKubeProxy is the migration of deploy/MIGRATION.md on a real kube-proxy: it
// programs the node from the API server (two Services, one a NodePort) in nftables mode and
// in iptables mode; once it is stopped, `nftproxy cleanup --kube-proxy` (with only
// CAP_NET_ADMIN, as in the DaemonSet) leaves nothing of it, and everything else, read with
// `nft -j list ruleset`, is byte-identical to what was there minus kube-proxy's objects.
func TestMigrateFromKubeProxy(t *testing.T) {
	netns.Skip(t)
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitBound)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, c: c, cs: c.Client()}
	e.createNode()
	web := httpService("web", 40, 1, 2)
	np := fixture.Service{Name: "np", Namespace: testNS, Type: corev1.ServiceTypeNodePort, ClusterIPs: []netip.Addr{lab.ClusterIPv4(41)},
		Ports: []fixture.Port{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, NodePort: 30080}}, Endpoints: fixture.Pods(1)}
	e.createService(web)
	e.createService(np)

	for _, mode := range []string{"nftables", "iptables"} {
		t.Run(mode, func(t *testing.T) {
			if mode == "iptables" && !hasIPTables() {
				t.Skip("needs the iptables binary (iptables-nft), as kube-proxy's iptables mode does")
			}
			migrate(t, ctx, c, mode)
		})
	}
}

func hasIPTables() bool {
	out, err := exec.Command("iptables", "--version").Output()
	return err == nil && strings.Contains(string(out), "nf_tables")
}

func migrate(t *testing.T, ctx context.Context, c *cluster.Cluster, mode string) {
	l := lab.New(t, lab.Options{Pods: 2})
	if err := l.NftApply(foreignTable); err != nil {
		t.Fatal(err)
	}
	if hasIPTables() {
		for _, args := range foreignIPTables {
			if _, err := l.Node.Run(append([]string{"iptables", "-w"}, args...)...); err != nil {
				t.Fatal(err)
			}
		}
	}
	kc := c.KubeconfigFor(t, l.Node, c.Admin())
	kp, err := l.StartInNode(ctx, c.Binaries.KubeProxy, "--proxy-mode", mode, "--kubeconfig", kc,
		"--hostname-override", fixture.NodeName, "--cluster-cidr", lab.PodCIDRv4+","+lab.PodCIDRv6,
		"--metrics-bind-address", "127.0.0.1:10249", "--healthz-bind-address", "127.0.0.1:10256",
		"--conntrack-max-per-core=0", "--v=2")
	if err != nil {
		t.Fatal(err)
	}
	// kube-proxy has programmed both Services when their chains are there.
	programmed := func(rs string) bool {
		if mode == "nftables" {
			return strings.Contains(rs, "default/web/tcp/http") && strings.Contains(rs, "default/np/tcp/http") && strings.Contains(rs, "table ip6 kube-proxy")
		}
		return strings.Count(rs, "chain KUBE-SVC-") >= 2 && strings.Contains(rs, "chain KUBE-NODEPORTS") && strings.Contains(rs, "table ip6 nat")
	}
	tier.WaitRuleset(t, ctx, l, kp, waitBound, pollInterval, "kube-proxy "+mode+" programming web and np", programmed)
	if err := kp.Stop(); err != nil {
		t.Logf("kube-proxy exit: %v", err)
	}

	before, err := l.RulesetJSON()
	if err != nil {
		t.Fatal(err)
	}
	left := kubeProxyObjects(t, before)
	if len(left) == 0 {
		t.Fatalf("kube-proxy %s left nothing to clean up; ruleset:\n%s", mode, before)
	}
	t.Logf("kube-proxy %s mode left %d objects (tables, chains, rules) to clean up", mode, len(left))
	out, err := l.Node.Run("setpriv", "--bounding-set=-all,+net_admin", "--no-new-privs", "--", daemonBinary, "cleanup", "--kube-proxy")
	if err != nil {
		t.Fatalf("cleanup --kube-proxy: %v\n%s", err, out)
	}
	after, err := l.RulesetJSON()
	if err != nil {
		t.Fatal(err)
	}
	if left := kubeProxyObjects(t, after); len(left) > 0 {
		t.Errorf("kube-proxy's objects left after cleanup:\n%s", strings.Join(left, "\n"))
	}
	want, got := withoutKubeProxy(t, before), withoutKubeProxy(t, after)
	if !bytes.Equal(got, want) {
		t.Errorf("the ruleset without kube-proxy's objects changed:\nbefore:\n%s\nafter:\n%s", want, got)
	}
	if !bytes.Contains(after, []byte(`"SITE-SSH"`)) || !bytes.Contains(after, []byte(`"site-firewall"`)) {
		t.Errorf("foreign rules missing after cleanup:\n%s", after)
	}
	rs, _ := l.Ruleset()
	t.Logf("after cleanup --kube-proxy (%s mode):\n%s", mode, rs)
}

// nftItem is one entry of `nft -j list ruleset`, kept as raw JSON to re-encode untouched.
type nftItem map[string]json.RawMessage

type nftObject struct {
	Family string `json:"family"`
	Table  string `json:"table"`
	Name   string `json:"name"`
	Chain  string `json:"chain"`
}

func nftItems(t *testing.T, js []byte) []nftItem {
	t.Helper()
	var doc struct {
		Nftables []nftItem `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		t.Fatalf("parse nft -j output: %v\n%s", err, js)
	}
	return doc.Nftables
}

// kubeProxyOwned says whether one ruleset item is kube-proxy's, and names it: anything in its
// nftables tables, its KUBE-* chains in the iptables tables (and their rules), and rules of
// other chains that jump or go to one of them. The rule is the test's own reading of the
// ruleset, from nft's JSON, not from proxy/kubeproxy's.
func kubeProxyOwned(kind string, raw json.RawMessage) (string, bool) {
	var o nftObject
	if err := json.Unmarshal(raw, &o); err != nil {
		return "", false
	}
	if o.Family != "ip" && o.Family != "ip6" {
		return "", false
	}
	if kind == "table" {
		o.Table = o.Name
	}
	if o.Table == kubeproxy.NFTablesTable {
		return fmt.Sprintf("%s %s %s %s", kind, o.Family, o.Table, o.Name), true
	}
	if !slices.Contains([]string{"filter", "nat", "mangle"}, o.Table) {
		return "", false
	}
	ours := func(chain string) bool {
		return strings.HasPrefix(chain, "KUBE-") && !slices.Contains([]string{"KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"}, chain)
	}
	switch kind {
	case "chain":
		return fmt.Sprintf("chain %s %s %s", o.Family, o.Table, o.Name), ours(o.Name)
	case "rule":
		if ours(o.Chain) {
			return fmt.Sprintf("rule in %s %s %s", o.Family, o.Table, o.Chain), true
		}
		var r struct {
			Expr []map[string]struct {
				Target string `json:"target"`
			} `json:"expr"`
		}
		_ = json.Unmarshal(raw, &r)
		for _, e := range r.Expr {
			for _, verb := range []string{"jump", "goto"} {
				if v, ok := e[verb]; ok && ours(v.Target) {
					return fmt.Sprintf("rule in %s %s %s: %s %s", o.Family, o.Table, o.Chain, verb, v.Target), true
				}
			}
		}
	}
	return "", false
}

func kubeProxyObjects(t *testing.T, js []byte) []string {
	var out []string
	for _, it := range nftItems(t, js) {
		for kind, raw := range it {
			if name, ok := kubeProxyOwned(kind, raw); ok {
				out = append(out, name)
			}
		}
	}
	return out
}

// withoutKubeProxy re-encodes the ruleset without kube-proxy's objects, one item per line.
func withoutKubeProxy(t *testing.T, js []byte) []byte {
	var buf bytes.Buffer
	for _, it := range nftItems(t, js) {
		owned := false
		for kind, raw := range it {
			_, owned = kubeProxyOwned(kind, raw)
		}
		if owned {
			continue
		}
		b, err := json.Marshal(it)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}
