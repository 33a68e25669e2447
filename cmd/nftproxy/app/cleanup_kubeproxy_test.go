package app

import (
	"bytes"
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
	chain KUBE-SEP-AAAA { jump KUBE-MARK-MASQ; meta l4proto tcp dnat to 198.18.0.10:80; }
	chain KUBE-SVC-AAAA { ip daddr 198.19.0.10 tcp dport 80 jump KUBE-SEP-AAAA; }
	chain KUBE-SERVICES { ip daddr 198.19.0.10 tcp dport 80 goto KUBE-SVC-AAAA; }
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
