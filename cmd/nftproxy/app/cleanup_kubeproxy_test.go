package app

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/test/netns"
)

// kubeProxyLeftovers is what kube-proxy leaves in both its modes (its nftables table; its
// iptables-nft chains, with the jumps from base chains) mixed with what others wrote: a foreign
// table, foreign rules and chains in the iptables tables, kubelet's KUBE-FIREWALL, and a
// KUBE-SERVICES chain in a table that is no iptables table.
const kubeProxyLeftovers = `
table ip kube-proxy {
	set cluster-ips { type ipv4_addr; }
	chain services { ip daddr @cluster-ips counter; }
	chain nat-prerouting { type nat hook prerouting priority -100; jump services; }
}
table ip6 kube-proxy {
	chain nat-output { type nat hook output priority -100; }
}
table inet kube-proxy {
	chain keep { type filter hook input priority 0; }
}
table ip other {
	chain KUBE-SERVICES { tcp dport 81 accept; }
	chain input { type filter hook input priority 10; jump KUBE-SERVICES; }
}
table ip nat {
	chain KUBE-MARK-MASQ { meta mark set meta mark | 0x4000; }
	chain KUBE-SEP-AAAAAAAAAAAAAAAA { jump KUBE-MARK-MASQ; meta l4proto tcp dnat to 198.18.0.10:80; }
	chain KUBE-SVC-BBBBBBBBBBBBBBBB { ip daddr 198.19.0.10 tcp dport 80 jump KUBE-SEP-AAAAAAAAAAAAAAAA; }
	chain KUBE-SERVICES { ip daddr 198.19.0.10 tcp dport 80 goto KUBE-SVC-BBBBBBBBBBBBBBBB; }
	chain KUBE-POSTROUTING { meta mark & 0x4000 == 0 return; masquerade; }
	chain MY-NAT { tcp dport 2222 dnat to 198.18.0.2:22; }
	chain PREROUTING {
		type nat hook prerouting priority -100; policy accept;
		tcp dport 2222 jump MY-NAT;
		jump KUBE-SERVICES;
		ip saddr 198.18.0.0/15 counter;
	}
	chain OUTPUT { type nat hook output priority -100; policy accept; jump KUBE-SERVICES; }
	chain POSTROUTING { type nat hook postrouting priority 100; policy accept; jump KUBE-POSTROUTING; }
}
table ip filter {
	chain KUBE-FIREWALL { ip daddr 127.0.0.0/8 ip saddr != 127.0.0.0/8 drop; }
	chain KUBE-NODEPORTS { tcp dport 30080 accept; }
	chain KUBE-FORWARD { meta mark & 0x4000 != 0 accept; }
	chain MINE { tcp dport 22 accept; }
	chain INPUT {
		type filter hook input priority 0; policy accept;
		jump KUBE-FIREWALL;
		jump KUBE-NODEPORTS;
		jump MINE;
	}
	chain FORWARD { type filter hook forward priority 0; policy drop; goto KUBE-FORWARD; ct state established accept; }
}
table ip6 mangle {
	chain KUBE-PROXY-CANARY { }
	chain PREROUTING { type filter hook prerouting priority -150; policy accept; }
}
`

// kubeProxyLeftoversRemoved is kubeProxyLeftovers without kube-proxy's objects: what must remain.
const kubeProxyLeftoversRemoved = `
table inet kube-proxy {
	chain keep { type filter hook input priority 0; }
}
table ip other {
	chain KUBE-SERVICES { tcp dport 81 accept; }
	chain input { type filter hook input priority 10; jump KUBE-SERVICES; }
}
table ip nat {
	chain MY-NAT { tcp dport 2222 dnat to 198.18.0.2:22; }
	chain PREROUTING {
		type nat hook prerouting priority -100; policy accept;
		tcp dport 2222 jump MY-NAT;
		ip saddr 198.18.0.0/15 counter;
	}
	chain OUTPUT { type nat hook output priority -100; policy accept; }
	chain POSTROUTING { type nat hook postrouting priority 100; policy accept; }
}
table ip filter {
	chain KUBE-FIREWALL { ip daddr 127.0.0.0/8 ip saddr != 127.0.0.0/8 drop; }
	chain MINE { tcp dport 22 accept; }
	chain INPUT {
		type filter hook input priority 0; policy accept;
		jump KUBE-FIREWALL;
		jump MINE;
	}
	chain FORWARD { type filter hook forward priority 0; policy drop; ct state established accept; }
}
table ip6 mangle {
	chain PREROUTING { type filter hook prerouting priority -150; policy accept; }
}
`

func listRuleset(t *testing.T, ns *netns.NS) string {
	t.Helper()
	out, err := ns.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func cleanupIn(t *testing.T, ns *netns.NS, args ...string) (int, string) {
	t.Helper()
	var code int
	var stderr bytes.Buffer
	if err := ns.Do(func() error {
		code = Main(append([]string{"nftproxy", "cleanup"}, args...), &bytes.Buffer{}, &stderr)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return code, stderr.String()
}

// cleanup --kube-proxy removes kube-proxy's nftables tables, KUBE-* chains and the rules leading
// to them, and leaves everything else as if they had never been there.
func TestCleanupKubeProxyRemovesExactlyItsRules(t *testing.T) {
	ns := netns.New(t, "nftp-kpclean")
	want := netns.New(t, "nftp-kpwant")
	if _, err := ns.RunStdin(kubeProxyLeftovers, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := want.RunStdin(kubeProxyLeftoversRemoved, "nft", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("iptables"); err == nil {
		// Real iptables-nft bytecode too: an xt comment match before the jump, as kube-proxy writes.
		for _, n := range []*netns.NS{ns, want} {
			if _, err := n.Run("iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "mine", "-j", "MY-NAT"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := ns.Run("iptables", "-w", "-t", "nat", "-A", "OUTPUT", "-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"); err != nil {
			t.Fatal(err)
		}
	} else {
		t.Log("no iptables binary: the xt-match rules are not part of this run")
	}
	if code, log := cleanupIn(t, ns, "--kube-proxy"); code != 0 {
		t.Fatalf("cleanup --kube-proxy exit %d: %s", code, log)
	}
	if got, exp := listRuleset(t, ns), listRuleset(t, want); got != exp {
		t.Errorf("ruleset after cleanup --kube-proxy:\n%s\nwant:\n%s", got, exp)
	}
	// Again: nothing left to do, still success; nftproxy's own cleanup is not part of it.
	if code, log := cleanupIn(t, ns, "--kube-proxy"); code != 0 || !strings.Contains(log, "nothing to clean up") {
		t.Errorf("second cleanup --kube-proxy exit %d: %s", code, log)
	}
}

// kubeRouterBeside is an iptables-restore script (for iptables-nft) with kube-proxy's chains
// beside kube-router's network-policy chains (k3s embeds kube-router), Calico's cali-* chains,
// kubelet's KUBE-FIREWALL and chains whose names start like kube-proxy's generated ones without
// their exact shape.
const kubeRouterBeside = `*filter
:KUBE-ROUTER-INPUT - [0:0]
:KUBE-ROUTER-FORWARD - [0:0]
:KUBE-ROUTER-OUTPUT - [0:0]
:KUBE-NWPLCY-DEFAULT - [0:0]
:KUBE-NWPLCY-3CCRQY7VGN4CJS2L - [0:0]
:KUBE-POD-FW-KQ5K4KD5EUBEOXLV - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-FW-CUSTOM - [0:0]
:cali-INPUT - [0:0]
:cali-FORWARD - [0:0]
:cali-fw-cali12345abcdef - [0:0]
-A INPUT -m comment --comment "kube-router netpol - 4IA2OSFRMVNDXBVV" -j KUBE-ROUTER-INPUT
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS
-A INPUT -j KUBE-FIREWALL
-A FORWARD -m comment --comment "kube-router netpol - TEMCG2JMHZYE7H7T" -j KUBE-ROUTER-FORWARD
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes load balancer firewall" -j KUBE-PROXY-FIREWALL
-A OUTPUT -m comment --comment "kube-router netpol - VEAAIY32XVBHCSCY" -j KUBE-ROUTER-OUTPUT
-A OUTPUT -j KUBE-FW-CUSTOM
-A KUBE-ROUTER-INPUT -d 198.19.0.0/16 -m comment --comment "allow traffic to primary/secondary cluster IP range" -j RETURN
-A KUBE-ROUTER-FORWARD -d 198.18.1.5/32 -m comment --comment "rule to jump traffic destined to POD name:web namespace: default to chain KUBE-POD-FW-KQ5K4KD5EUBEOXLV" -j KUBE-POD-FW-KQ5K4KD5EUBEOXLV
-A KUBE-POD-FW-KQ5K4KD5EUBEOXLV -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A KUBE-POD-FW-KQ5K4KD5EUBEOXLV -j KUBE-NWPLCY-DEFAULT
-A KUBE-POD-FW-KQ5K4KD5EUBEOXLV -j KUBE-NWPLCY-3CCRQY7VGN4CJS2L
-A KUBE-POD-FW-KQ5K4KD5EUBEOXLV -m mark ! --mark 0x10000/0x10000 -m comment --comment "default deny" -j DROP
-A KUBE-NWPLCY-DEFAULT -j MARK --set-xmark 0x10000/0x10000
-A KUBE-NWPLCY-3CCRQY7VGN4CJS2L -s 198.18.2.0/24 -p tcp --dport 8080 -j MARK --set-xmark 0x10000/0x10000
-A KUBE-FIREWALL -d 127.0.0.0/8 ! -s 127.0.0.0/8 -j DROP
-A KUBE-NODEPORTS -p tcp --dport 30080 -j ACCEPT
-A KUBE-PROXY-FIREWALL -d 198.18.3.1/32 -p tcp --dport 80 -j DROP
-A KUBE-FW-CUSTOM -p tcp --dport 2222 -j DROP
-A INPUT -m comment --comment "cali:Cz_u1IQiXIMmKD4c" -j cali-INPUT
-A FORWARD -m comment --comment "cali:wUHhoiAYhphO9Mso" -j cali-FORWARD
-A cali-FORWARD -o cali12345abcdef -m comment --comment "cali:to-wl" -j cali-fw-cali12345abcdef
-A cali-fw-cali12345abcdef -m conntrack --ctstate INVALID -j DROP
-A cali-INPUT -p udp --dport 4789 -m comment --comment "cali:vxlan" -j ACCEPT
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]
:KUBE-SEP-IT2ZTR26TO4XFPTO - [0:0]
:KUBE-SVC-CUSTOM - [0:0]
:KUBE-ROUTER-SNAT - [0:0]
:cali-nat-outgoing - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -p tcp --dport 2222 -j KUBE-SVC-CUSTOM
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A POSTROUTING -j KUBE-ROUTER-SNAT
-A KUBE-SERVICES -d 198.19.0.1/32 -p tcp -m comment --comment "default/kubernetes:https cluster IP" -m tcp --dport 443 -j KUBE-SVC-NPX46M4PTMTKRN6Y
-A KUBE-SVC-NPX46M4PTMTKRN6Y -m comment --comment "default/kubernetes:https -> 198.18.0.2:6443" -j KUBE-SEP-IT2ZTR26TO4XFPTO
-A KUBE-SEP-IT2ZTR26TO4XFPTO -s 198.18.0.2/32 -j KUBE-MARK-MASQ
-A KUBE-SEP-IT2ZTR26TO4XFPTO -p tcp -j DNAT --to-destination 198.18.0.2:6443
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-SVC-CUSTOM -p tcp -j DNAT --to-destination 198.18.0.3:22
-A KUBE-ROUTER-SNAT -s 198.18.1.0/24 -j MASQUERADE
-A POSTROUTING -m comment --comment "cali:O3lYWMrLQYEMJtB5" -j cali-nat-outgoing
-A cali-nat-outgoing -s 198.18.1.0/24 ! -d 198.18.0.0/15 -j MASQUERADE
COMMIT
`

// nftJSONObjects returns every object of `nft -j list ruleset` in the ip family, as the kernel
// printed it, with the chain it belongs to and the chains its rule jumps or goes to.
type nftJSONObject struct {
	raw     string
	kind    string // table, chain, rule, set
	chain   string // a chain's name, a rule's chain
	targets []string
}

func nftJSON(t *testing.T, ns *netns.NS) []nftJSONObject {
	t.Helper()
	out, err := ns.Run("nft", "-j", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatalf("nft -j list ruleset: %v", err)
	}
	var objs []nftJSONObject
	for _, o := range doc.Nftables {
		for kind, raw := range o {
			var body struct {
				Family, Chain, Name string
				Expr                []map[string]json.RawMessage
			}
			if kind == "metainfo" || json.Unmarshal(raw, &body) != nil || body.Family != "ip" {
				continue
			}
			obj := nftJSONObject{raw: string(raw), kind: kind, chain: body.Chain}
			if kind == "chain" {
				obj.chain = body.Name
			}
			for _, e := range body.Expr {
				for _, verb := range []string{"jump", "goto"} {
					var v struct{ Target string }
					if e[verb] != nil && json.Unmarshal(e[verb], &v) == nil {
						obj.targets = append(obj.targets, v.Target)
					}
				}
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// cleanup --kube-proxy deletes kube-proxy's chains, known by exact name, and the rules jumping
// to them; kube-router's KUBE-* chains, kubelet's, and foreign chains that merely start like a
// generated name stay byte-identical in the kernel's own JSON, with every rule and handle.
func TestCleanupKubeProxyLeavesOtherKUBEChains(t *testing.T) {
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("needs iptables-restore (iptables-nft), installed by test/deps.sh")
	}
	ns := netns.New(t, "nftp-kprouter")
	if _, err := ns.RunStdin(kubeRouterBeside, "iptables-restore", "-w"); err != nil {
		t.Fatal(err)
	}
	kubeProxy := map[string]bool{"KUBE-NODEPORTS": true, "KUBE-SERVICES": true, "KUBE-PROXY-FIREWALL": true,
		"KUBE-POSTROUTING": true, "KUBE-MARK-MASQ": true, "KUBE-SVC-NPX46M4PTMTKRN6Y": true, "KUBE-SEP-IT2ZTR26TO4XFPTO": true}
	var want []string
	removed := 0
	for _, o := range nftJSON(t, ns) {
		gone := kubeProxy[o.chain]
		for _, c := range o.targets {
			gone = gone || kubeProxy[c]
		}
		if gone {
			removed++
			continue
		}
		want = append(want, o.raw)
	}
	if removed == 0 {
		t.Fatal("the script wrote none of kube-proxy's chains: the test proves nothing")
	}
	if code, log := cleanupIn(t, ns, "--kube-proxy"); code != 0 {
		t.Fatalf("cleanup --kube-proxy exit %d: %s", code, log)
	}
	var got []string
	for _, o := range nftJSON(t, ns) {
		got = append(got, o.raw)
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("ip tables after cleanup --kube-proxy (kernel JSON):\n%s\nwant (before, without kube-proxy's %d objects):\n%s",
			strings.Join(got, "\n"), removed, strings.Join(want, "\n"))
	}
	// iptables-nft still reads what remains as its own.
	if _, err := ns.Run("iptables-save"); err != nil {
		t.Errorf("iptables-save after cleanup: %v", err)
	}
}
