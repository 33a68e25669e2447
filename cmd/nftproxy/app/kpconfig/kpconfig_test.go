package kpconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kube-proxy/config/v1alpha1"
)

func kubeadm(t *testing.T) *v1alpha1.KubeProxyConfiguration {
	t.Helper()
	cfg, err := Load(filepath.Join("testdata", "kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func settings(tr Translation) map[string]string {
	m := map[string]string{}
	for _, s := range tr.Settings {
		m[s.Flag] = s.Value
	}
	return m
}

// TestKubeadmConfigMapStarts: the file kubeadm writes, as it is, is accepted and means what
// kube-proxy makes of it.
func TestKubeadmConfigMapStarts(t *testing.T) {
	tr := Translate(kubeadm(t))
	if err := tr.Err(); err != nil {
		t.Fatalf("kubeadm's file refused: %v", err)
	}
	want := map[string]string{
		"kubeconfig":             "/var/lib/kube-proxy/kubeconfig.conf",
		"healthz-bind-address":   "0.0.0.0:10256",
		"metrics-bind-address":   "127.0.0.1:10249",
		"bind-address-hard-fail": "false",
		"masquerade-all":         "false",
		"detect-local-mode":      "ClusterCIDR",
		"cluster-cidr":           "10.244.0.0/16",
	}
	if got := settings(tr); !reflect.DeepEqual(got, want) {
		t.Errorf("settings:\n got %v\nwant %v", got, want)
	}
	if len(tr.Warnings) != 0 {
		t.Errorf("warnings on kubeadm's nftables file: %v", tr.Warnings)
	}
	if tr.Conntrack != DefaultConntrack() {
		t.Errorf("conntrack: got %+v, want kube-proxy's defaults %+v", tr.Conntrack, DefaultConntrack())
	}
}

func TestDecodeIsStrict(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("testdata", "kubeadm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, edit, want string
	}{
		{"unknown field", strings.Replace(string(base), "clusterCIDR:", "clusterCIRD: 10.0.0.0/8\nclusterCIDR:", 1), `unknown field "clusterCIRD"`},
		{"unknown nested field", strings.Replace(string(base), "  tcpBeLiberal: false", "  tcpBeLiberal: false\n  tcpLiberal: true", 1), `unknown field "conntrack.tcpLiberal"`},
		{"duplicate field", strings.Replace(string(base), "mode: nftables", "mode: nftables\nmode: ipvs", 1), `"mode" already set`},
		{"other kind", strings.Replace(string(base), "kind: KubeProxyConfiguration", "kind: KubeletConfiguration", 1), "KubeletConfiguration"},
		{"other version", strings.Replace(string(base), "v1alpha1", "v1alpha2", 1), "v1alpha2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.edit))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func i32(v int32) *int32                   { return &v }
func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
func yes() *bool                           { b := true; return &b }

// TestTranslateEachField changes one field of kubeadm's file at a time and checks what it
// becomes: a flag, a warning naming it, or a refusal naming it.
func TestTranslateEachField(t *testing.T) {
	type want struct{ flag, value, warn, refuse string }
	for _, tc := range []struct {
		name string
		edit func(c *v1alpha1.KubeProxyConfiguration)
		want want
	}{
		{"featureGates", func(c *v1alpha1.KubeProxyConfiguration) { c.FeatureGates = map[string]bool{"X": true} }, want{warn: "featureGates.X"}},
		{"clientConnection.kubeconfig", func(c *v1alpha1.KubeProxyConfiguration) { c.ClientConnection.Kubeconfig = "/k" }, want{flag: "kubeconfig", value: "/k"}},
		{"clientConnection.contentType", func(c *v1alpha1.KubeProxyConfiguration) { c.ClientConnection.ContentType = "application/json" }, want{warn: "clientConnection.contentType"}},
		{"clientConnection.qps", func(c *v1alpha1.KubeProxyConfiguration) { c.ClientConnection.QPS = 50 }, want{warn: "clientConnection.qps"}},
		{"logging.verbosity", func(c *v1alpha1.KubeProxyConfiguration) { c.Logging.Verbosity = 4 }, want{flag: "v", value: "4"}},
		{"logging.format", func(c *v1alpha1.KubeProxyConfiguration) { c.Logging.Format = "json" }, want{warn: "logging.format"}},
		{"logging.flushFrequency", func(c *v1alpha1.KubeProxyConfiguration) { c.Logging.FlushFrequency.Duration.Duration = time.Second }, want{warn: "logging.flushFrequency"}},
		{"logging.options", func(c *v1alpha1.KubeProxyConfiguration) { c.Logging.Options.Text.SplitStream = true }, want{warn: "logging.options"}},
		{"hostnameOverride", func(c *v1alpha1.KubeProxyConfiguration) { c.HostnameOverride = " Node-A " }, want{flag: "hostname-override", value: "node-a"}},
		{"bindAddress specific", func(c *v1alpha1.KubeProxyConfiguration) { c.BindAddress = "10.0.0.5" }, want{warn: "bindAddress"}},
		{"bindAddress with nodePortAddresses primary", func(c *v1alpha1.KubeProxyConfiguration) {
			c.BindAddress = "10.0.0.5"
			c.NodePortAddresses = []string{"primary"}
		}, want{refuse: "bindAddress"}},
		{"bindAddress invalid", func(c *v1alpha1.KubeProxyConfiguration) { c.BindAddress = "nope" }, want{refuse: "bindAddress"}},
		{"bindAddress ipv6 picks v6 defaults", func(c *v1alpha1.KubeProxyConfiguration) { c.BindAddress = "::" }, want{flag: "metrics-bind-address", value: "[::1]:10249"}},
		{"healthzBindAddress without port", func(c *v1alpha1.KubeProxyConfiguration) { c.HealthzBindAddress = "10.1.2.3" }, want{flag: "healthz-bind-address", value: "10.1.2.3:10256"}},
		{"metricsBindAddress", func(c *v1alpha1.KubeProxyConfiguration) { c.MetricsBindAddress = "0.0.0.0:9999" }, want{flag: "metrics-bind-address", value: "0.0.0.0:9999"}},
		{"bindAddressHardFail", func(c *v1alpha1.KubeProxyConfiguration) { c.BindAddressHardFail = true }, want{flag: "bind-address-hard-fail", value: "true"}},
		{"enableProfiling", func(c *v1alpha1.KubeProxyConfiguration) { c.EnableProfiling = true }, want{flag: "profiling", value: "true"}},
		{"showHiddenMetricsForVersion", func(c *v1alpha1.KubeProxyConfiguration) { c.ShowHiddenMetricsForVersion = "1.33" }, want{warn: "showHiddenMetricsForVersion"}},
		{"mode unknown", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "userspace" }, want{refuse: "mode"}},
		{"mode kernelspace", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "kernelspace" }, want{refuse: "mode"}},
		{"mode empty is iptables", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "" }, want{warn: "mode"}},
		{"nftables.masqueradeBit", func(c *v1alpha1.KubeProxyConfiguration) { c.NFTables.MasqueradeBit = i32(3) }, want{flag: "masquerade-bit", value: "3"}},
		{"nftables.masqueradeAll", func(c *v1alpha1.KubeProxyConfiguration) { c.NFTables.MasqueradeAll = true }, want{flag: "masquerade-all", value: "true"}},
		{"nftables.minSyncPeriod", func(c *v1alpha1.KubeProxyConfiguration) { c.NFTables.MinSyncPeriod.Duration = 2 * time.Second }, want{flag: "min-sync-period", value: "2s"}},
		{"nftables.minSyncPeriod negative", func(c *v1alpha1.KubeProxyConfiguration) { c.NFTables.MinSyncPeriod.Duration = -time.Second }, want{refuse: "nftables.minSyncPeriod"}},
		{"nftables.syncPeriod", func(c *v1alpha1.KubeProxyConfiguration) { c.NFTables.SyncPeriod.Duration = time.Minute }, want{flag: "full-sync-period", value: "1m0s"}},
		{"iptables section in nftables mode", func(c *v1alpha1.KubeProxyConfiguration) { c.IPTables.MasqueradeBit = i32(3) }, want{warn: "iptables.masqueradeBit"}},
		{"iptables.masqueradeBit in iptables mode", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "iptables"; c.IPTables.MasqueradeBit = i32(5) }, want{flag: "masquerade-bit", value: "5"}},
		{"iptables.masqueradeAll in ipvs mode", func(c *v1alpha1.KubeProxyConfiguration) {
			c.Mode = "ipvs"
			c.IPTables.MasqueradeAll = true
		}, want{flag: "masquerade-all", value: "true"}},
		{"iptables.localhostNodePorts unset in iptables mode", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "iptables" }, want{warn: "iptables.localhostNodePorts"}},
		{"iptables.minSyncPeriod in iptables mode", func(c *v1alpha1.KubeProxyConfiguration) {
			c.Mode = "iptables"
			c.IPTables.MinSyncPeriod.Duration = 5 * time.Second
		}, want{flag: "min-sync-period", value: "5s"}},
		{"iptables.localhostNodePorts true", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "iptables"; c.IPTables.LocalhostNodePorts = yes() }, want{refuse: "iptables.localhostNodePorts"}},
		{"iptables.syncPeriod in nftables mode", func(c *v1alpha1.KubeProxyConfiguration) { c.IPTables.SyncPeriod.Duration = time.Second }, want{warn: "iptables.syncPeriod"}},
		{"ipvs section in nftables mode", func(c *v1alpha1.KubeProxyConfiguration) { c.IPVS.StrictARP = true }, want{warn: "ipvs"}},
		{"ipvs.minSyncPeriod in ipvs mode", func(c *v1alpha1.KubeProxyConfiguration) {
			c.Mode = "ipvs"
			c.IPVS.MinSyncPeriod.Duration = 3 * time.Second
		}, want{flag: "min-sync-period", value: "3s"}},
		{"ipvs.scheduler sh", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "ipvs"; c.IPVS.Scheduler = "sh" }, want{refuse: "ipvs.scheduler"}},
		{"ipvs.scheduler rr", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "ipvs"; c.IPVS.Scheduler = "rr" }, want{warn: "ipvs.scheduler"}},
		{"ipvs.strictARP", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "ipvs"; c.IPVS.StrictARP = true }, want{warn: "ipvs.strictARP"}},
		{"ipvs.excludeCIDRs", func(c *v1alpha1.KubeProxyConfiguration) {
			c.Mode = "ipvs"
			c.IPVS.ExcludeCIDRs = []string{"10.0.0.0/8"}
		}, want{warn: "ipvs.excludeCIDRs"}},
		{"ipvs.tcpTimeout", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "ipvs"; c.IPVS.TCPTimeout.Duration = time.Minute }, want{warn: "ipvs.tcpTimeout"}},
		{"nftables section in ipvs mode", func(c *v1alpha1.KubeProxyConfiguration) { c.Mode = "ipvs"; c.NFTables.MasqueradeAll = true }, want{warn: "nftables"}},
		{"detectLocalMode NodeCIDR", func(c *v1alpha1.KubeProxyConfiguration) { c.DetectLocalMode = "NodeCIDR" }, want{flag: "detect-local-mode", value: "NodeCIDR"}},
		{"detectLocalMode BridgeInterface", func(c *v1alpha1.KubeProxyConfiguration) {
			c.DetectLocalMode = "BridgeInterface"
			c.DetectLocal.BridgeInterface = "cbr0"
		}, want{refuse: "detectLocalMode"}},
		{"detectLocal unused", func(c *v1alpha1.KubeProxyConfiguration) { c.DetectLocal.InterfaceNamePrefix = "veth" }, want{warn: "detectLocal"}},
		{"clusterCIDR dual-stack", func(c *v1alpha1.KubeProxyConfiguration) { c.ClusterCIDR = "10.244.0.0/16,fd00:10::/56" }, want{flag: "cluster-cidr", value: "10.244.0.0/16,fd00:10::/56"}},
		{"nodePortAddresses primary", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"primary"} }, want{flag: "nodeport-addresses", value: "primary"}},
		{"nodePortAddresses CIDRs", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"10.0.0.0/8", "fd00::/64"} }, want{flag: "nodeport-addresses", value: "10.0.0.0/8,fd00::/64"}},
		// kube-proxy v1.37's keywords, in any combination with CIDRs.
		{"nodePortAddresses primary with a CIDR", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"10.0.0.0/8", "primary"} }, want{flag: "nodeport-addresses", value: "10.0.0.0/8,primary"}},
		{"nodePortAddresses all", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"all"} }, want{flag: "nodeport-addresses", value: ""}},
		{"nodePortAddresses all outweighs CIDRs", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"10.0.0.0/8", "all"} }, want{flag: "nodeport-addresses", value: ""}},
		{"nodePortAddresses localhost beside a CIDR", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"localhost", "10.0.0.0/8"} }, want{flag: "nodeport-addresses", value: "10.0.0.0/8", warn: "nodePortAddresses"}},
		{"nodePortAddresses localhost alone", func(c *v1alpha1.KubeProxyConfiguration) { c.NodePortAddresses = []string{"localhost"} }, want{refuse: "nodePortAddresses"}},
		{"nodePortAddresses localhost with the localhost gate", func(c *v1alpha1.KubeProxyConfiguration) {
			c.NodePortAddresses = []string{"primary", "localhost"}
			c.FeatureGates = map[string]bool{"KubeProxyNFTablesLocalhostNodePorts": true}
		}, want{refuse: "nodePortAddresses"}},
		{"nodePortAddresses localhost in iptables mode", func(c *v1alpha1.KubeProxyConfiguration) {
			c.Mode = "iptables"
			c.NodePortAddresses = []string{"primary", "localhost"}
		}, want{refuse: "nodePortAddresses"}},
		{"nodePortAddresses localhost in iptables mode without localhostNodePorts", func(c *v1alpha1.KubeProxyConfiguration) {
			c.Mode = "iptables"
			no := false
			c.IPTables.LocalhostNodePorts = &no
			c.NodePortAddresses = []string{"primary", "localhost"}
		}, want{flag: "nodeport-addresses", value: "primary", warn: "nodePortAddresses"}},
		{"nodePortAddresses keyword twice", func(c *v1alpha1.KubeProxyConfiguration) {
			c.NodePortAddresses = []string{"primary", "10.0.0.0/8", "primary"}
		}, want{refuse: "nodePortAddresses"}},
		{"bindAddress with primary beside CIDRs", func(c *v1alpha1.KubeProxyConfiguration) {
			c.BindAddress = "10.0.0.5"
			c.NodePortAddresses = []string{"10.0.0.0/8", "primary"}
		}, want{refuse: "bindAddress"}},
		{"oomScoreAdj", func(c *v1alpha1.KubeProxyConfiguration) { c.OOMScoreAdj = i32(-999) }, want{warn: "oomScoreAdj"}},
		{"configSyncPeriod", func(c *v1alpha1.KubeProxyConfiguration) { c.ConfigSyncPeriod.Duration = time.Minute }, want{warn: "configSyncPeriod"}},
		{"portRange", func(c *v1alpha1.KubeProxyConfiguration) { c.PortRange = "30000-30100" }, want{warn: "portRange"}},
		{"windowsRunAsService", func(c *v1alpha1.KubeProxyConfiguration) { c.WindowsRunAsService = true }, want{warn: "windowsRunAsService"}},
		{"winkernel", func(c *v1alpha1.KubeProxyConfiguration) { c.Winkernel.EnableDSR = true }, want{warn: "winkernel"}},
		{"conntrack negative", func(c *v1alpha1.KubeProxyConfiguration) { c.Conntrack.Min = i32(-1) }, want{refuse: "conntrack"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kubeadm(t)
			tc.edit(c)
			tr := Translate(c)
			if tc.want.flag != "" {
				if got, ok := settings(tr)[tc.want.flag]; !ok || got != tc.want.value {
					t.Errorf("--%s: got %q (set %v), want %q; settings %v", tc.want.flag, got, ok, tc.want.value, tr.Settings)
				}
			}
			if !hasNote(tr.Warnings, tc.want.warn) {
				t.Errorf("no warning on %s; warnings %v", tc.want.warn, tr.Warnings)
			}
			if !hasNote(tr.Refused, tc.want.refuse) {
				t.Errorf("no refusal of %s; refused %v", tc.want.refuse, tr.Refused)
			}
			if tc.want.refuse == "" && len(tr.Refused) > 0 {
				t.Errorf("refused: %v", tr.Refused)
			}
			if tc.want.refuse != "" && (tr.Err() == nil || !strings.Contains(tr.Err().Error(), tc.want.refuse)) {
				t.Errorf("Err() = %v, want it to name %s", tr.Err(), tc.want.refuse)
			}
		})
	}
}

// TestKubeProxy137File: a v1.37 file with v1.37's new values decodes; primary beside a CIDR is
// mapped, localhost is dropped with a warning (the gate is off, so kube-proxy serves no node
// port on loopback either); with the gate on, the file is refused naming the field and why.
func TestKubeProxy137File(t *testing.T) {
	cfg, err := Load(filepath.Join("testdata", "v1.37.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tr := Translate(cfg)
	if err := tr.Err(); err != nil {
		t.Fatalf("refused: %v", err)
	}
	if got, want := settings(tr)["nodeport-addresses"], "primary,198.18.0.0/15"; got != want {
		t.Errorf("--nodeport-addresses %q, want %q", got, want)
	}
	var notes []string
	for _, n := range tr.Warnings {
		notes = append(notes, n.String())
	}
	for _, want := range []string{"nodePortAddresses: localhost dropped", "featureGates.KubeProxyNFTablesLocalhostNodePorts: ignored"} {
		if !strings.Contains(strings.Join(notes, "\n"), want) {
			t.Errorf("no warning %q; warnings:\n%s", want, strings.Join(notes, "\n"))
		}
	}
	cfg.FeatureGates["KubeProxyNFTablesLocalhostNodePorts"] = true
	err = Translate(cfg).Err()
	if err == nil || !strings.Contains(err.Error(), "nodePortAddresses: localhost with featureGates.KubeProxyNFTablesLocalhostNodePorts asks for TCP node ports on 127.0.0.1") {
		t.Errorf("with the gate on: got %v, want nodePortAddresses refused for node ports on 127.0.0.1", err)
	}
}

// TestEveryFieldClassified: the fields of the KubeProxyConfiguration this build decodes are the
// ones Translate and README.md's table classify. A k8s.io/kube-proxy upgrade that adds one
// fails here: strict decoding would accept it and Translate would drop it silently.
func TestEveryFieldClassified(t *testing.T) {
	classified := []string{ // as of k8s.io/kube-proxy v0.37.2 (v1.37: the same fields as v1.34)
		"featureGates", "clientConnection.kubeconfig", "clientConnection.acceptContentTypes", "clientConnection.contentType",
		"clientConnection.qps", "clientConnection.burst", "logging.format", "logging.flushFrequency", "logging.verbosity",
		"logging.vmodule", "logging.options", "hostnameOverride", "bindAddress", "healthzBindAddress", "metricsBindAddress",
		"bindAddressHardFail", "enableProfiling", "showHiddenMetricsForVersion", "mode", "iptables.masqueradeBit",
		"iptables.masqueradeAll", "iptables.localhostNodePorts", "iptables.syncPeriod", "iptables.minSyncPeriod",
		"ipvs.syncPeriod", "ipvs.minSyncPeriod", "ipvs.scheduler", "ipvs.excludeCIDRs", "ipvs.strictARP", "ipvs.tcpTimeout",
		"ipvs.tcpFinTimeout", "ipvs.udpTimeout", "nftables.masqueradeBit", "nftables.masqueradeAll", "nftables.syncPeriod",
		"nftables.minSyncPeriod", "winkernel.networkName", "winkernel.sourceVip", "winkernel.enableDSR",
		"winkernel.rootHnsEndpointName", "winkernel.forwardHealthCheckVip", "detectLocalMode", "detectLocal.bridgeInterface",
		"detectLocal.interfaceNamePrefix", "clusterCIDR", "nodePortAddresses", "oomScoreAdj", "conntrack.maxPerCore",
		"conntrack.min", "conntrack.tcpEstablishedTimeout", "conntrack.tcpCloseWaitTimeout", "conntrack.tcpBeLiberal",
		"conntrack.udpTimeout", "conntrack.udpStreamTimeout", "configSyncPeriod", "portRange", "windowsRunAsService",
	}
	known := map[string]bool{}
	for _, f := range classified {
		known[f] = true
	}
	got := map[string]bool{}
	for _, f := range fieldPaths(reflect.TypeOf(v1alpha1.KubeProxyConfiguration{}), "", 0) {
		got[f] = true
		if !known[f] {
			t.Errorf("KubeProxyConfiguration has a field nftproxy does not classify: %s; map, warn about or refuse it in Translate, add it to README.md's table and to this list", f)
		}
	}
	for _, f := range classified {
		if !got[f] {
			t.Errorf("KubeProxyConfiguration no longer has %s: remove it from Translate, README.md's table and this list", f)
		}
	}
}

func hasNote(ns []Note, field string) bool {
	if field == "" {
		return true
	}
	for _, n := range ns {
		if n.Field == field || strings.HasPrefix(n.Field, field+".") {
			return true
		}
	}
	return false
}

func TestConntrack(t *testing.T) {
	c := kubeadm(t)
	c.Conntrack = v1alpha1.KubeProxyConntrackConfiguration{MaxPerCore: i32(0), Min: i32(1000), TCPEstablishedTimeout: dur(time.Hour),
		TCPCloseWaitTimeout: dur(0), TCPBeLiberal: true, UDPTimeout: metav1.Duration{Duration: 30 * time.Second}, UDPStreamTimeout: metav1.Duration{Duration: 2 * time.Minute}}
	got := Translate(c).Conntrack
	want := Conntrack{MaxPerCore: 0, Min: 1000, TCPEstablishedTimeout: time.Hour, TCPCloseWaitTimeout: 0, TCPBeLiberal: true, UDPTimeout: 30 * time.Second, UDPStreamTimeout: 2 * time.Minute}
	if got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

// TestREADMENamesEveryField: the README's table of kube-proxy's flags and fields names every
// field of KubeProxyConfiguration (one level into its sections), so none is left undocumented.
func TestREADMENamesEveryField(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fieldPaths(reflect.TypeOf(v1alpha1.KubeProxyConfiguration{}), "", 0) {
		if !strings.Contains(string(readme), "`"+f+"`") {
			t.Errorf("README.md's kube-proxy table does not name `%s`", f)
		}
	}
}

// fieldPaths lists the JSON paths of t's fields, descending into sections (structs other than
// durations and quantities) once.
func fieldPaths(t reflect.Type, prefix string, depth int) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue // TypeMeta (apiVersion, kind) and unexported
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && depth == 0 && ft.PkgPath() != "k8s.io/apimachinery/pkg/apis/meta/v1" {
			out = append(out, fieldPaths(ft, prefix+name+".", depth+1)...)
			continue
		}
		out = append(out, prefix+name)
	}
	return out
}
