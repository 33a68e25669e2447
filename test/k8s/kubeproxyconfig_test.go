package k8s

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// kubeadmConfig is a KubeProxyConfiguration as kubeadm writes it into the kube-proxy ConfigMap
// (every field present, in kubeadm's order), with every field set to a value an operator might
// choose. KUBECONFIG is the mounted kubeconfig.conf; the CIDRs are the lab's.
const kubeadmConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: true
clientConnection:
  acceptContentTypes: ""
  burst: 10
  contentType: application/vnd.kubernetes.protobuf
  kubeconfig: KUBECONFIG
  qps: 5
clusterCIDR: CLUSTER_CIDR
configSyncPeriod: 15m0s
conntrack:
  maxPerCore: 65536
  min: 262144
  tcpBeLiberal: true
  tcpCloseWaitTimeout: 30m0s
  tcpEstablishedTimeout: 12h0m0s
  udpStreamTimeout: 2m0s
  udpTimeout: 30s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ClusterCIDR
enableProfiling: false
featureGates:
  ServiceTrafficDistribution: true
healthzBindAddress: 0.0.0.0:10256
hostnameOverride: NODE
iptables:
  localhostNodePorts: false
  masqueradeAll: false
  masqueradeBit: 14
  minSyncPeriod: 1s
  syncPeriod: 30s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 30s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 5s
  format: text
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 2
metricsBindAddress: 127.0.0.1:10249
mode: nftables
nftables:
  masqueradeAll: false
  masqueradeBit: 12
  minSyncPeriod: 2s
  syncPeriod: 10m0s
nodePortAddresses:
- primary
oomScoreAdj: -999
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`

// TestKubeadmKubeProxyConfiguration: kube-proxy's ConfigMap as kubeadm writes it (every field
// set), mounted as the deploy/kubeadm component mounts it, starts nftproxy with the same
// behaviour as the equivalent flags: the same effective configuration and the same programmed
// ruleset, byte for byte up to the order of set elements. The file's kubeconfig is the only one
// the daemon gets (the API server by address), and the fields it ignores are logged by name.
func TestKubeadmKubeProxyConfiguration(t *testing.T) {
	e, objs := setupEnv(t, filepath.Join("testdata", "kubeadm"), nil, lab.Options{Pods: 2})
	kc, err := os.ReadFile(e.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	mount := t.TempDir() // where the kubelet would mount kube-system/kube-proxy
	conf := strings.NewReplacer("KUBECONFIG", filepath.Join(mount, "kubeconfig.conf"),
		"CLUSTER_CIDR", lab.PodCIDRv4+","+lab.PodCIDRv6, "NODE", fixture.NodeName).Replace(kubeadmConfig)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
		Data: map[string]string{"config.conf": conf, "kubeconfig.conf": string(kc)}}
	if _, err := e.cs.CoreV1().ConfigMaps("kube-system").Create(e.ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := e.cs.CoreV1().ConfigMaps("kube-system").Get(e.ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range got.Data {
		if err := os.WriteFile(filepath.Join(mount, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var fromFile []string
	for _, a := range daemonArgs(t, objs, fixture.NodeName) {
		fromFile = append(fromFile, strings.ReplaceAll(a, "/var/lib/kube-proxy", mount))
	}
	if !contains(fromFile, "--config="+filepath.Join(mount, "config.conf")) {
		t.Fatalf("the kubeadm component's DaemonSet does not run with --config: %q", fromFile)
	}

	web := httpService("web", 11, 1, 2)
	np := httpService("np", 12, 1)
	np.Type = corev1.ServiceTypeNodePort
	e.createService(web)
	e.createService(np)

	// The daemon as the kubeadm component runs it: no --kubeconfig but the file's.
	e.start(fromFile, false)
	e.waitProgrammed(web)
	e.waitProgrammed(np)
	rsFile := canonicalRuleset(e.ruleset())
	if code := e.healthz(); !strings.Contains(code, "200") {
		t.Errorf("/healthz on the file's healthzBindAddress: %s", code)
	}
	outFile := e.daemon.Output()
	if err := e.daemon.Stop(); err != nil {
		t.Logf("stop: %v", err)
	}
	for _, w := range []string{`field="featureGates.ServiceTrafficDistribution"`, `field="oomScoreAdj"`, `field="configSyncPeriod"`,
		`field="clientConnection.qps"`, `field="logging.flushFrequency"`, `field="iptables.masqueradeBit"`, `field="ipvs"`} {
		if !strings.Contains(outFile, w) {
			t.Errorf("the daemon did not warn about %s:\n%s", w, outFile)
		}
	}
	if !strings.Contains(rsFile, "0x00001000") {
		t.Errorf("the ruleset does not use nftables.masqueradeBit 12 (0x1000):\n%s", rsFile)
	}
	for _, fam := range []string{"ip", "ip6"} {
		if _, err := e.lab.Nft("delete", "table", fam, "nftproxy"); err != nil {
			t.Fatal(err)
		}
	}

	// The same daemon with the equivalent flags (the component's own flags, and the file's
	// fields written as flags), from an empty kernel.
	var fromFlags []string
	for _, a := range fromFile {
		if !strings.HasPrefix(a, "--config=") {
			fromFlags = append(fromFlags, a)
		}
	}
	fromFlags = append(fromFlags, "--kubeconfig="+filepath.Join(mount, "kubeconfig.conf"),
		"--cluster-cidr="+lab.PodCIDRv4+","+lab.PodCIDRv6, "--healthz-bind-address=0.0.0.0:10256",
		"--metrics-bind-address=127.0.0.1:10249", "--bind-address-hard-fail=true", "--masquerade-bit=12",
		"--masquerade-all=false", "--min-sync-period=2s", "--full-sync-period=10m", "--detect-local-mode=ClusterCIDR",
		"--nodeport-addresses=primary", "--v=2")
	e.start(fromFlags, false)
	e.waitProgrammed(web)
	e.waitProgrammed(np)
	rsFlags := canonicalRuleset(e.ruleset())
	if rsFile != rsFlags {
		t.Errorf("rulesets differ\nfrom the file:\n%s\nfrom the flags:\n%s", rsFile, rsFlags)
	}
	effFile, effFlags := effective(t, outFile), effective(t, e.daemon.Output())
	delete(effFile, "config")
	delete(effFlags, "config")
	for k, v := range effFile {
		if effFlags[k] != v {
			t.Errorf("--%s: %q from the file, %q from the flags", k, v, effFlags[k])
		}
	}
	if len(effFile) != len(effFlags) || len(effFile) < 20 {
		t.Errorf("effective configurations: %d flags from the file, %d from the flags", len(effFile), len(effFlags))
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

var elements = regexp.MustCompile(`(?s)elements = \{(.*?)\}`)

// canonicalRuleset sorts the elements of each set and map: the kernel lists hash sets in the
// order of a per-set random seed, which differs between two daemons programming the same thing.
func canonicalRuleset(rs string) string {
	return elements.ReplaceAllStringFunc(rs, func(m string) string {
		body := elements.FindStringSubmatch(m)[1]
		var els []string
		for _, e := range strings.Split(body, ",") {
			if e = strings.Join(strings.Fields(e), " "); e != "" {
				els = append(els, e)
			}
		}
		sort.Strings(els)
		return "elements = { " + strings.Join(els, ", ") + " }"
	})
}

var effectiveFlag = regexp.MustCompile(`--([a-z0-9-]+)=(\S*) \(`)

// effective is the "effective configuration" the daemon logs: flag name → value.
func effective(t *testing.T, out string) map[string]string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if !strings.Contains(l, `"effective configuration"`) {
			continue
		}
		m := map[string]string{}
		for _, f := range effectiveFlag.FindAllStringSubmatch(l, -1) {
			m[f[1]] = f[2]
		}
		return m
	}
	t.Fatalf("no effective configuration in the log:\n%s", out)
	return nil
}

// TestDetectLocalNodeCIDR: with --detect-local-mode NodeCIDR the daemon, with the DaemonSet's
// RBAC (list, no get, on its Node), waits until its Node has spec.podCIDRs, as kube-proxy does,
// and then treats that CIDR, not --cluster-cidr, as the cluster's traffic.
func TestDetectLocalNodeCIDR(t *testing.T) {
	e, objs := setupEnv(t, deployDir, nil, lab.Options{Pods: 1})
	web := httpService("web", 11, 1)
	e.createService(web)
	e.start(append(daemonArgs(t, objs, fixture.NodeName), "--detect-local-mode=NodeCIDR"), true)
	const podCIDR = "198.18.128.0/25" // inside --cluster-cidr (198.18.128.0/24), so only NodeCIDR puts it in the rules
	e.waitUntil("the daemon waits for the Node's pod CIDRs", func() (bool, string) {
		out := e.daemon.Output()
		return strings.Contains(out, "the Node has no spec.podCIDRs yet"), out
	})
	if rs := e.ruleset(); strings.Contains(rs, marker(web)) {
		t.Fatalf("programmed before the Node had pod CIDRs:\n%s", rs)
	}
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, fixture.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.PodCIDRs = []string{podCIDR}
	if _, err := e.cs.CoreV1().Nodes().Update(e.ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitProgrammed(web)
	rs := e.ruleset()
	if !strings.Contains(rs, podCIDR) || strings.Contains(rs, lab.PodCIDRv4+" ") {
		t.Errorf("want the Node's %s as the cluster's traffic instead of --cluster-cidr %s:\n%s", podCIDR, lab.PodCIDRv4, rs)
	}
}
