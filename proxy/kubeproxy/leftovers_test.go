package kubeproxy

import "testing"

func TestIsKubeProxyChain(t *testing.T) {
	for name, want := range map[string]bool{
		"KUBE-SERVICES": true, "KUBE-SVC-ABCDEF": true, "KUBE-SEP-ABCDEF": true, "KUBE-EXT-X": true,
		"KUBE-PROXY-CANARY": true, "KUBE-MARK-MASQ": true, "KUBE-PROXY-FIREWALL": true,
		"KUBE-FIREWALL": false, "KUBE-KUBELET-CANARY": false, "KUBE-IPTABLES-HINT": false,
		"INPUT": false, "kube-services": false, "MY-KUBE-X": false,
	} {
		if got := IsKubeProxyChain(name); got != want {
			t.Errorf("IsKubeProxyChain(%q) = %v, want %v", name, got, want)
		}
	}
}
