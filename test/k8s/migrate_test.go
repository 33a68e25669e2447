package k8s

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/nftproxy/nftproxy/proxy/kubeproxycleanup"
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

// TestMigrateFromKubeProxy is the migration of deploy/MIGRATION.md on a real kube-proxy, each
// release built (v1.37.2 and v1.34.4; their nftables layouts differ): it programs the node from
// the API server (two Services, one a NodePort) in nftables mode and in iptables mode; once it is stopped, `nftproxy cleanup --kube-proxy` (with only
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

	for _, release := range kubeProxyReleases() {
		kp, err := c.Binaries.KubeProxyAt(release)
		if err != nil {
			t.Fatalf("%s: %v", envKubeProxyVersion, err)
		}
		for _, mode := range []string{"nftables", "iptables"} {
			t.Run(release+"/"+mode, func(t *testing.T) {
				if mode == "iptables" && !hasIPTables() {
					t.Skip("needs the iptables binary (iptables-nft), as kube-proxy's iptables mode does")
				}
				migrate(t, ctx, c, kp, mode)
			})
		}
	}
}

func hasIPTables() bool {
	out, err := exec.Command("iptables", "--version").Output()
	return err == nil && strings.Contains(string(out), "nf_tables")
}

// waitKubeProxySynced waits until the kube-proxy running in the node (its metrics on
// 127.0.0.1:10249) has synced its rules once in each family of svc's ClusterIPs, as its
// per-family kubeproxy_sync_proxy_rules_last_timestamp_seconds says. Nothing else tells: it
// opens health-check node ports during its first family's sync, and its /healthz answers 200
// from its start. Until a family is synced, removing nftproxy's tables leaves that family's
// Services untranslated, and the kernel stops translating even the connections nftproxy's
// rules translated while no table of the family holds a NAT chain.
func (e *env) waitKubeProxySynced(svc fixture.Service) {
	e.t.Helper()
	var want []string
	for _, ip := range svc.ClusterIPs {
		fam := "IPv4"
		if ip.Is6() {
			fam = "IPv6"
		}
		want = append(want, fmt.Sprintf("kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family=%q} ", fam))
	}
	e.waitUntil("kube-proxy synced in every family of "+svc.Name, func() (bool, string) {
		r, err := tier.Get(e.ctx, e.lab.Node, "http://127.0.0.1:10249/metrics")
		if err != nil {
			return false, err.Error()
		}
		for _, series := range want {
			if !strings.Contains(r.Body, "\n"+series) {
				return false, "no " + series
			}
		}
		return true, ""
	})
}

func migrate(t *testing.T, ctx context.Context, c *cluster.Cluster, kubeProxy, mode string) {
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
	kp, err := l.StartInNode(ctx, kubeProxy, "--proxy-mode", mode, "--kubeconfig", kc,
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

	// kube-proxy has exited, but a child it started (iptables-restore) may still be writing:
	// the ruleset is read until two reads half a second apart agree.
	var before []byte
	err = tier.Poll(ctx, waitBound, 500*time.Millisecond, func() (bool, error) {
		cur, err := l.RulesetJSON()
		settled := err == nil && bytes.Equal(cur, before)
		before = cur
		return settled, err
	})
	if err != nil {
		t.Fatalf("ruleset after kube-proxy stopped: %v", err)
	}
	left := kubeProxyObjects(t, before)
	if len(left) == 0 {
		t.Fatalf("kube-proxy %s left nothing to clean up; ruleset:\n%s", mode, before)
	}
	t.Logf("kube-proxy %s mode left %d objects (tables, chains, rules) to clean up", mode, len(left))
	// The cleanup runs as deploy/migrate's DaemonSet runs it: its arguments, NET_ADMIN only.
	args := cleanupArgs(t, "cleanup-kube-proxy.yaml")
	out, err := l.Node.Command(append([]string{"setpriv", "--bounding-set=-all,+net_admin", "--no-new-privs", "--", daemonBinary}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nftproxy %s: %v\n%s", strings.Join(args, " "), err, out)
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

// migrateDaemonSet reads a DaemonSet of deploy/migrate.
func migrateDaemonSet(t *testing.T, file string) *appsv1.DaemonSet {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(deployDir, "migrate", file))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(b, &ds); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return &ds
}

// cleanupArgs returns the arguments of the cleanup initContainer of deploy/migrate's file, after
// checking it runs the base DaemonSet's image with NET_ADMIN only.
func cleanupArgs(t *testing.T, file string) []string {
	t.Helper()
	ds := migrateDaemonSet(t, file)
	base, _ := daemonSetOf(t, buildDeploy(t))
	ics := ds.Spec.Template.Spec.InitContainers
	if len(ics) != 1 {
		t.Fatalf("%s: %d initContainers, want 1", file, len(ics))
	}
	ic := ics[0]
	if want := base.Spec.Template.Spec.Containers[0].Image; ic.Image != want {
		t.Errorf("%s: image %q, want deploy/'s %q", file, ic.Image, want)
	}
	if sc := ic.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || (sc.Privileged != nil && *sc.Privileged) {
		t.Errorf("%s: securityContext %+v, want ALL dropped but NET_ADMIN, unprivileged", file, sc)
	}
	if !ds.Spec.Template.Spec.HostNetwork {
		t.Errorf("%s: not on the host network: it would clean a pod's namespace, not the node's", file)
	}
	return ic.Args
}

// The migration manifests pass the API server's validation and admission.
func TestMigrateManifestsServerSideDryRun(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), waitBound)
	defer cancel()
	var objs []*unstructured.Unstructured
	for _, f := range []string{"cleanup-kube-proxy.yaml", "cleanup-nftproxy.yaml"} {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(migrateDaemonSet(t, f))
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion("apps/v1")
		u.SetKind("DaemonSet")
		objs = append(objs, u)
	}
	if err := apply(ctx, c.Config(), objs, true); err != nil {
		t.Fatal(err)
	}
	if got := cleanupArgs(t, "cleanup-nftproxy.yaml"); !slices.Equal(got, []string{"cleanup"}) {
		t.Errorf("cleanup-nftproxy.yaml runs %q, want nftproxy cleanup", got)
	}
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
// ruleset, from nft's JSON, not from proxy/kubeproxycleanup's.
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
	if o.Table == kubeproxycleanup.NFTablesTable {
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
