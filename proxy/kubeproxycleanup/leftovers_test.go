package kubeproxycleanup

import (
	"crypto/sha256"
	"encoding/base32"
	"testing"
)

func TestIsKubeProxyChain(t *testing.T) {
	for name, want := range map[string]bool{
		// kube-proxy's fixed names (iptables and IPVS modes, and older releases)
		"KUBE-SERVICES": true, "KUBE-EXTERNAL-SERVICES": true, "KUBE-NODEPORTS": true,
		"KUBE-POSTROUTING": true, "KUBE-MARK-MASQ": true, "KUBE-FORWARD": true,
		"KUBE-PROXY-FIREWALL": true, "KUBE-PROXY-CANARY": true, "KUBE-MARK-DROP": true,
		"KUBE-LOAD-BALANCER": true, "KUBE-NODE-PORT": true,
		// its generated per-Service and per-endpoint chains: prefix + 16 base32 characters
		"KUBE-SVC-NPX46M4PTMTKRN6Y": true, "KUBE-SEP-IT2ZTR26TO4XFPTO": true,
		"KUBE-EXT-6NN2EBAUTVRLGUQO": true, "KUBE-SVL-GNZBNJ2PO5MGZ6GT": true,
		"KUBE-FW-7VG4NMOVGTVSGR2S": true, "KUBE-XLB-23QHRGSJF2ZV2WCO": true,
		// kubelet's
		"KUBE-FIREWALL": false, "KUBE-KUBELET-CANARY": false, "KUBE-IPTABLES-HINT": false,
		// kube-router's network policies (embedded in k3s)
		"KUBE-ROUTER-INPUT": false, "KUBE-ROUTER-FORWARD": false, "KUBE-ROUTER-OUTPUT": false,
		"KUBE-ROUTER-SERVICES": false, "KUBE-NWPLCY-DEFAULT": false,
		"KUBE-NWPLCY-3CCRQY7VGN4CJS2L": false, "KUBE-POD-FW-KQ5K4KD5EUBEOXLV": false,
		"KUBE-SRC-2A6IAVJMQAU2JOIR": false, "KUBE-DST-IF3RXE43UJGGAF3Z": false,
		// Calico's and others'
		"cali-INPUT": false, "cali-fw-cali1234": false, "FLANNEL-FWD": false, "CILIUM_FORWARD": false,
		// a generated prefix with anything but the exact hash shape
		"KUBE-SVC-": false, "KUBE-SVC-ABCDEF": false, "KUBE-SVC-NPX46M4PTMTKRN6YX": false,
		"KUBE-SVC-npx46m4ptmtkrn6y": false, "KUBE-SEP-IT2ZTR26TO4XFPT0": false, "KUBE-SEP-MY-OWN-CHAIN-X": false,
		"KUBE-SVC-CUSTOM": false, "KUBE-": false, "KUBE-SERVICES-X": false,
		"INPUT": false, "kube-services": false, "MY-KUBE-X": false,
	} {
		if got := IsKubeProxyChain(name); got != want {
			t.Errorf("IsKubeProxyChain(%q) = %v, want %v", name, got, want)
		}
	}
}

// The hash shape is what kube-proxy writes: base32(sha256(...))[:16], whatever the input.
func TestIsKubeProxyChainGeneratedNames(t *testing.T) {
	for _, in := range []string{"default/kubernetes:https" + "tcp", "ns/svc:dns" + "udp" + "198.18.0.10:53", ""} {
		h := sha256.Sum256([]byte(in))
		enc := base32.StdEncoding.EncodeToString(h[:])[:ServiceChainHashLen]
		for _, p := range ServiceChainPrefixes {
			if !IsKubeProxyChain(p + enc) {
				t.Errorf("IsKubeProxyChain(%q) = false: a name kube-proxy generates", p+enc)
			}
		}
	}
}
