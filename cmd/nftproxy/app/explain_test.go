package app

import (
	"strings"
	"testing"
)

// explain --manifests traces the tables render prints: the node port it explains is the one
// render prints (the same fixed seed), the Node manifest's address is the node's, and a
// Service render lists as rejected is named with its reason.
func TestExplainManifests(t *testing.T) {
	dir := manifestDir(t, nodePortManifests+`---
apiVersion: v1
kind: Service
metadata: {name: bad, namespace: default, annotations: {nftproxy.io/port-ranges: "rtp=5000-4000"}}
spec: {clusterIP: 198.19.0.71, ports: [{name: rtp, protocol: UDP, port: 5000}]}
`)
	flags := []string{"--manifests", dir, "--node-name", "node-a", "--ip-families", "ipv4", "--cluster-cidr", "198.18.128.0/24"}
	code, rendered, errOut := run(append([]string{"render"}, flags...)...)
	if code != 0 {
		t.Fatalf("render: exit %d: %s", code, errOut)
	}
	ports := nodePortElems(t, rendered)

	code, out, errOut := run(append(append([]string{"explain"}, flags...), "default/np")...)
	if code != 0 {
		t.Fatalf("explain --manifests: exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"not this machine's kernel",
		"-> 198.19.0.70:80, table ip nftproxy", "service port: default/np/tcp/http (ClusterIP)",
		"-> 198.18.1.1:" + ports[0] + ", table ip nftproxy", "-> 198.18.1.1:" + ports[1] + ", table ip nftproxy",
		"198.18.128.70:80                         100.0%", "masquerade: yes",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("explain --manifests default/np lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = run(append(append([]string{"explain"}, flags...), "default/bad")...)
	if code != 0 || !strings.Contains(out, "not programmed: rejected (RangeEndBeforeStart)") {
		t.Errorf("explain --manifests default/bad: exit %d:\n%s", code, out)
	}
	code, out, _ = run(append(append([]string{"explain"}, flags...), "--from", "198.18.128.9", "198.19.0.70:82/tcp")...)
	if code != 0 || !strings.Contains(out, "verdict: rejected with a TCP reset") || !strings.Contains(out, "no Service has port tcp/82") {
		t.Errorf("explain --manifests of an undefined port: exit %d:\n%s", code, out)
	}
}

// TestDefaultRejectionsURL: explain asks the daemon where deploy/ tells it to listen.
func TestDefaultRejectionsURL(t *testing.T) {
	for in, want := range map[string]string{
		"":                "http://127.0.0.1:10249/rejections",
		"127.0.0.1:10265": "http://127.0.0.1:10265/rejections",
		"0.0.0.0:10265":   "http://127.0.0.1:10265/rejections",
		"[::]:10265":      "http://[::1]:10265/rejections",
		"[fd00::1]:10265": "http://[fd00::1]:10265/rejections",
		"not an address":  "http://127.0.0.1:10249/rejections",
	} {
		if got := defaultRejectionsURL(in); got != want {
			t.Errorf("defaultRejectionsURL(%q) = %q, want %q", in, got, want)
		}
	}
}
