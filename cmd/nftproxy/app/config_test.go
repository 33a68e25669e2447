package app

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kubeadmConfig is kubeadm's kube-proxy config.conf (as in kpconfig/testdata) with some fields
// changed by edit (old → new pairs).
func kubeadmConfig(t *testing.T, edit ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("kpconfig", "testdata", "kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i+1 < len(edit); i += 2 {
		if !strings.Contains(s, edit[i]) {
			t.Fatalf("kubeadm.yaml has no %q", edit[i])
		}
		s = strings.Replace(s, edit[i], edit[i+1], 1)
	}
	p := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func parseRun(t *testing.T, scope flagScope, args ...string) (*Options, error) {
	t.Helper()
	var o Options
	err := parseFlags("run", &o, scope, args, io.Discard)
	return &o, err
}

// TestConfigFileSetsFlags: the file's fields become the flags' values.
func TestConfigFileSetsFlags(t *testing.T) {
	cfg := kubeadmConfig(t,
		"clusterCIDR: 10.244.0.0/16", "clusterCIDR: 10.244.0.0/16,fd00:10:244::/56",
		"hostnameOverride: \"\"", "hostnameOverride: node-a",
		"  masqueradeAll: false\n  masqueradeBit: null\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nnodePortAddresses",
		"  masqueradeAll: true\n  masqueradeBit: 5\n  minSyncPeriod: 2s\n  syncPeriod: 10m\nnodePortAddresses",
		"nodePortAddresses: null", "nodePortAddresses: [primary]",
		"metricsBindAddress: \"\"", "metricsBindAddress: 0.0.0.0",
		"bindAddressHardFail: false", "bindAddressHardFail: true",
		"  verbosity: 0", "  verbosity: 3",
		"detectLocalMode: \"\"", "detectLocalMode: NodeCIDR")
	o, err := parseRun(t, runFlags, "--config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, got, want string }{
		{"cluster-cidr", o.ClusterCIDRs.String(), "10.244.0.0/16,fd00:10:244::/56"},
		{"node-name", o.NodeName, "node-a"},
		{"kubeconfig", o.Kubeconfig, "/var/lib/kube-proxy/kubeconfig.conf"},
		{"masquerade-all", strconv.FormatBool(o.MasqueradeAll), "true"},
		{"masquerade-bit", strconv.Itoa(o.MasqueradeBit), "5"},
		{"min-sync-period", o.MinSyncPeriod.String(), "2s"},
		{"full-sync-period", o.FullSyncPeriod.String(), "10m0s"},
		{"nodeport-addresses", nodePortAddresses{o}.String(), "primary"},
		{"metrics-bind-address", o.MetricsAddress, "0.0.0.0:10249"},
		{"healthz-bind-address", o.HealthzAddress, "0.0.0.0:10256"},
		{"bind-address-hard-fail", strconv.FormatBool(o.BindAddressHardFail), "true"},
		{"v", strconv.Itoa(o.Verbosity), "3"},
		{"detect-local-mode", o.DetectLocalMode, "NodeCIDR"},
	} {
		if c.got != c.want {
			t.Errorf("--%s: got %q, want %q", c.name, c.got, c.want)
		}
	}
	if !strings.Contains(strings.Join(o.config.effective, " "), "--masquerade-bit=5 (config nftables.masqueradeBit)") {
		t.Errorf("effective configuration does not name the source: %v", o.config.effective)
	}
}

// TestConfigFile137: kube-proxy v1.37's file (primary, localhost and a CIDR in
// nodePortAddresses) starts nftproxy with primary and the CIDR; localhost is only warned about.
func TestConfigFile137(t *testing.T) {
	o, err := parseRun(t, runFlags, "--config", filepath.Join("kpconfig", "testdata", "v1.37.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := (nodePortAddresses{o}).String(); got != "primary,198.18.0.0/15" || !o.NodePortPrimary {
		t.Errorf("--nodeport-addresses %q (primary %v), want primary,198.18.0.0/15", got, o.NodePortPrimary)
	}
	// all outweighs the rest of the list: every node address, the flag's empty value.
	o, err = parseRun(t, runFlags, "--config", kubeadmConfig(t, "nodePortAddresses: null", "nodePortAddresses: [10.0.0.0/8, all]"))
	if err != nil {
		t.Fatal(err)
	}
	if got := (nodePortAddresses{o}).String(); got != "" || o.NodePortPrimary {
		t.Errorf("all: --nodeport-addresses %q (primary %v), want empty", got, o.NodePortPrimary)
	}
}

// TestFlagsOverrideConfigFile: a flag given on the command line wins over the file, whatever the
// order; a flag not given takes the file's value, not its default.
func TestFlagsOverrideConfigFile(t *testing.T) {
	cfg := kubeadmConfig(t, "hostnameOverride: \"\"", "hostnameOverride: from-file",
		"  masqueradeAll: false\n  masqueradeBit: null\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nnodePortAddresses",
		"  masqueradeAll: true\n  masqueradeBit: 5\n  minSyncPeriod: 0s\n  syncPeriod: 0s\nnodePortAddresses")
	for _, args := range [][]string{
		{"--masquerade-bit", "7", "--config", cfg, "--cluster-cidr", "198.18.0.0/16", "--node-name", "from-flag"},
		{"--config", cfg, "--masquerade-bit=7", "--cluster-cidr=198.18.0.0/16", "--hostname-override=from-flag"},
	} {
		o, err := parseRun(t, runFlags, args...)
		if err != nil {
			t.Fatal(err)
		}
		if o.MasqueradeBit != 7 || o.ClusterCIDRs.String() != "198.18.0.0/16" || o.NodeName != "from-flag" {
			t.Errorf("%v: masquerade-bit %d, cluster-cidr %s, node %q; want the flags' 7, 198.18.0.0/16, from-flag", args, o.MasqueradeBit, o.ClusterCIDRs.String(), o.NodeName)
		}
		if !o.MasqueradeAll {
			t.Errorf("%v: masquerade-all false, want the file's true (not given on the command line)", args)
		}
		var over []string
		for _, s := range o.config.overridden {
			over = append(over, s.Field)
		}
		if got := strings.Join(over, ","); got != "hostnameOverride,nftables.masqueradeBit,clusterCIDR" {
			t.Errorf("%v: overridden %q", args, got)
		}
	}
}

// TestConfigFileRefusals: a field nftproxy cannot honour, an unknown field, or a value a flag
// refuses fails the command with a usage error naming it.
func TestConfigFileRefusals(t *testing.T) {
	for _, tc := range []struct {
		edit []string
		want string
	}{
		{[]string{"detectLocalMode: \"\"", "detectLocalMode: BridgeInterface"}, "detectLocalMode"},
		{[]string{"portRange: \"\"", "portRange: \"\"\nproxyMode: nftables"}, `unknown field "proxyMode"`},
		{[]string{"nodePortAddresses: null", "nodePortAddresses: [not-a-cidr]"}, "nodePortAddresses"},
	} {
		_, err := parseRun(t, runFlags, "--config", kubeadmConfig(t, tc.edit...))
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want a usage error naming %s", tc.edit, err, tc.want)
		}
	}
	if _, err := parseRun(t, runFlags, "--config", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing --config file was accepted")
	}
}

// TestConfigFileRender: render reads the file too, and skips the daemon's fields silently.
func TestConfigFileRender(t *testing.T) {
	o, err := parseRun(t, renderFlags, "--config", kubeadmConfig(t, "enableProfiling: false", "enableProfiling: true"))
	if err != nil {
		t.Fatal(err)
	}
	if o.ClusterCIDRs.String() != "10.244.0.0/16" || len(o.config.missing) != 0 {
		t.Errorf("render: cluster-cidr %s, missing %v", o.ClusterCIDRs.String(), o.config.missing)
	}
}

func TestNodePortAddressesFlag(t *testing.T) {
	for _, tc := range []struct {
		arg, want string
		primary   bool
		err       bool
	}{
		{"primary", "primary", true, false},
		{"10.0.0.0/8,fd00::/64", "10.0.0.0/8,fd00::/64", false, false},
		{"primary,10.0.0.0/8", "primary,10.0.0.0/8", true, false},
		{"10.0.0.0/8, primary", "primary,10.0.0.0/8", true, false},
		{"primary,primary", "", false, true},
		{"all", "", false, true},
		{"localhost,10.0.0.0/8", "", false, true},
		{"", "", false, false},
	} {
		o, err := parseRun(t, runFlags, "--nodeport-addresses", tc.arg)
		if (err != nil) != tc.err {
			t.Errorf("%q: error %v, want error %v", tc.arg, err, tc.err)
			continue
		}
		if err == nil && (nodePortAddresses{o}.String() != tc.want || o.NodePortPrimary != tc.primary) {
			t.Errorf("%q: got %q primary %v, want %q %v", tc.arg, nodePortAddresses{o}.String(), o.NodePortPrimary, tc.want, tc.primary)
		}
	}
}

// TestNodeSettings: NodeCIDR reads spec.podCIDRs; primary is each family's first InternalIP,
// else its first ExternalIP.
func TestNodeSettings(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "n"},
			{Type: corev1.NodeExternalIP, Address: "203.0.113.5"},
			{Type: corev1.NodeInternalIP, Address: "198.18.0.2"},
			{Type: corev1.NodeInternalIP, Address: "198.18.0.3"},
			{Type: corev1.NodeExternalIP, Address: "2001:db8::5"},
		}}}
	cidrs, primary, err := nodeSettings(n)
	if err != nil {
		t.Fatal(err)
	}
	if got := cidrs.String(); got != "10.244.1.0/24,fd00:10:244:1::/64" {
		t.Errorf("pod CIDRs %s", got)
	}
	if got := primary.String(); got != "198.18.0.2/32,2001:db8::5/128" {
		t.Errorf("primary %s", got)
	}
	n.Spec.PodCIDRs, n.Spec.PodCIDR = nil, "10.244.2.0/24"
	if cidrs, _, _ := nodeSettings(n); cidrs.String() != "10.244.2.0/24" {
		t.Errorf("spec.podCIDR fallback: %s", cidrs.String())
	}
}

// TestResolveFromManifestNode: in manifest mode NodeCIDR and primary come from the Node manifest.
func TestResolveFromManifestNode(t *testing.T) {
	dir := t.TempDir()
	node := `apiVersion: v1
kind: Node
metadata: {name: n1}
spec: {podCIDRs: [198.18.64.0/24]}
status: {addresses: [{type: InternalIP, address: 198.18.0.2}]}
`
	if err := os.WriteFile(filepath.Join(dir, "node.yaml"), []byte(node), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseRun(t, renderFlags, "--manifests", dir, "--node-name", "n1", "--detect-local-mode", "NodeCIDR", "--nodeport-addresses", "primary", "--cluster-cidr", "10.0.0.0/8")
	if err != nil {
		t.Fatal(err)
	}
	if err := o.resolveFromNode(t.Context(), newLogger(0, io.Discard)); err != nil {
		t.Fatal(err)
	}
	if o.ClusterCIDRs.String() != "198.18.64.0/24" || o.NodePortCIDRs.String() != "198.18.0.2/32" {
		t.Errorf("cluster CIDRs %s, node-port CIDRs %s", o.ClusterCIDRs.String(), o.NodePortCIDRs.String())
	}
	// CIDRs given beside primary add to the Node's primary address (kube-proxy v1.37).
	if err := (nodePortAddresses{o}).Set("primary,fd00:99::/64"); err != nil {
		t.Fatal(err)
	}
	if err := o.resolveFromNode(t.Context(), newLogger(0, io.Discard)); err != nil {
		t.Fatal(err)
	}
	if got := o.NodePortCIDRs.String(); got != "198.18.0.2/32,fd00:99::/64" {
		t.Errorf("primary with a CIDR: node-port CIDRs %s, want 198.18.0.2/32,fd00:99::/64", got)
	}
	o.NodeName = "other"
	if err := o.resolveFromNode(t.Context(), newLogger(0, io.Discard)); err == nil || !strings.Contains(err.Error(), `no Node named "other"`) {
		t.Errorf("missing Node: %v", err)
	}
}

// TestRenderNodeCIDRAndPrimary: --detect-local-mode NodeCIDR makes the Node's spec.podCIDRs the
// cluster's traffic (not --cluster-cidr), and --nodeport-addresses primary serves node ports on
// the Node's first InternalIP only, not on its other addresses.
func TestRenderNodeCIDRAndPrimary(t *testing.T) {
	dir := t.TempDir()
	manifests := `apiVersion: v1
kind: Node
metadata: {name: node-a}
spec: {podCIDRs: [198.18.200.0/24]}
status: {addresses: [{type: InternalIP, address: 198.18.0.2}, {type: InternalIP, address: 198.18.0.3}, {type: ExternalIP, address: 198.18.9.9}]}
---
apiVersion: v1
kind: Service
metadata: {name: np, namespace: default}
spec: {type: NodePort, clusterIP: 198.19.0.60, ports: [{name: http, port: 80, nodePort: 30080}]}
`
	if err := os.WriteFile(filepath.Join(dir, "m.yaml"), []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"render", "--manifests", dir, "--node-name", "node-a", "--ip-families", "ipv4", "--cluster-cidr", "198.18.128.0/17"}
	_, before, errOut := run(base...)
	if !strings.Contains(before, "198.18.128.0/17") || !strings.Contains(before, "198.18.0.3") || !strings.Contains(before, "198.18.9.9") {
		t.Fatalf("without the flags: want --cluster-cidr and every node address in the ruleset:\n%s\n%s", before, errOut)
	}
	code, after, errOut := run(append(base, "--detect-local-mode", "NodeCIDR", "--nodeport-addresses", "primary")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(after, "198.18.200.0/24") || strings.Contains(after, "198.18.128.0/17") {
		t.Errorf("NodeCIDR: want the Node's pod CIDR 198.18.200.0/24 instead of --cluster-cidr:\n%s", after)
	}
	if !strings.Contains(after, "198.18.0.2") || strings.Contains(after, "198.18.0.3") || strings.Contains(after, "198.18.9.9") {
		t.Errorf("primary: want node ports on 198.18.0.2 only:\n%s", after)
	}
}
