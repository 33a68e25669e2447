package app

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func run(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(append([]string{"nftproxy"}, args...), &o, &e)
	return code, o.String(), e.String()
}

func TestCommandLineErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, 2, "Usage"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"run without a source", []string{"run"}, 2, "no source: pass --manifests"},
		{"same mark bits", []string{"render", "--manifests", ".", "--masquerade-bit", "3", "--drop-bit", "3"}, 2, "choose two different bits"},
		{"bit out of range", []string{"render", "--manifests", ".", "--drop-bit", "32"}, 2, "from 0 to 31"},
		{"affinity map of no entries", []string{"render", "--manifests", ".", "--affinity-map-size", "0"}, 2, "--affinity-map-size 0"},
		{"bad cidr", []string{"render", "--manifests", ".", "--cluster-cidr", "10.0.0.0/33"}, 2, "is not a CIDR"},
		{"bad family", []string{"render", "--manifests", ".", "--ip-families", "ipx"}, 2, "not ipv4 or ipv6"},
		{"bad reserved ports", []string{"render", "--manifests", ".", "--reserved-ports", "22,ssh"}, 2, `--reserved-ports: "ssh" is not a port`},
		{"bad block range", []string{"render", "--manifests", ".", "--range-node-port-range", "9-1"}, 2, "--range-node-port-range"},
		{"stray argument", []string{"render", "--manifests", ".", "extra"}, 2, "every setting is a flag"},
		{"help", []string{"run", "-h"}, 0, "-min-sync-period"},
		{"help names the cost bound", []string{"run", "-h"}, 0, "-max-service-cost"},
		{"negative cost bound", []string{"run", "--manifests", ".", "--max-service-cost", "-1"}, 2, "--max-service-cost -1: must be 0 (no bound) or more"},
		{"negative cost bound in render", []string{"render", "--manifests", ".", "--max-service-cost", "-1"}, 2, "--max-service-cost -1: must be 0"},
		{"explain without a target", []string{"explain"}, 2, "name one Service (NAMESPACE/NAME) or one destination"},
		{"explain of two targets", []string{"explain", "a/b", "c/d"}, 2, `got "a/b c/d"`},
		{"explain of a bad target", []string{"explain", "web"}, 2, "neither NAMESPACE/NAME nor DST:PORT/PROTO"},
		{"explain of a bad protocol", []string{"explain", "198.19.0.10:80/icmp"}, 2, "not tcp, udp or sctp"},
		{"explain from another family", []string{"explain", "--from", "fd00::1", "198.19.0.10:80/tcp"}, 2, "different families"},
		{"explain help", []string{"explain", "-h"}, 0, "-rejections-url"},
		// The servers' ports are reserved: every command that builds the ruleset takes them.
		{"render takes the healthz address", []string{"render", "-h"}, 0, "-healthz-bind-address"},
		{"render takes the metrics address", []string{"render", "-h"}, 0, "-metrics-bind-address"},
		{"explain takes the healthz address", []string{"explain", "-h"}, 0, "-healthz-bind-address"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := run(c.args...)
			if code != c.code || !strings.Contains(out+errOut, c.want) {
				t.Errorf("exit %d, output %q; want exit %d and output containing %q", code, out+errOut, c.code, c.want)
			}
		})
	}
	if code, out, _ := run("version"); code != 0 || !strings.HasPrefix(out, "nftproxy ") {
		t.Errorf("version: exit %d, %q", code, out)
	}
}

const badRange = `apiVersion: v1
kind: Service
metadata: {name: broken, namespace: default, annotations: {nftproxy.io/port-ranges: "rtp=16384-1000"}}
spec:
  clusterIP: 198.19.0.50
  clusterIPs: [198.19.0.50]
  ports: [{name: rtp, protocol: UDP, port: 16384}]
`

func TestRenderExamplesWithARejectedService(t *testing.T) {
	dir := t.TempDir()
	ex, err := filepath.Glob("../../../deploy/examples/*.yaml")
	if err != nil || len(ex) == 0 {
		t.Fatalf("examples not found: %v", err)
	}
	for _, f := range ex {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "broken.yaml"), []byte(badRange), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "garbage.yaml"), []byte("kind: Service\n  ::: not yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := run("render", "--manifests", dir, "--node-name", "node-a")
	if code != 0 {
		t.Fatalf("render exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"table ip nftproxy {", "table ip6 nftproxy {",
		`# rejected service default/broken (`, "end before start",
		"# skipped file:", "garbage.yaml",
		"198.19.0.11 . udp . 16384-16393", // the range: one interval element
		"198.19.0.12 . tcp comment",       // all-ports on the ClusterIP
		"tcp . 30080",                     // the web node port
		"198.18.0.1",                      // the node address accepts node ports
	} {
		if !strings.Contains(out, want) {
			t.Errorf("render output lacks %q", want)
		}
	}
	if strings.Contains(out, "198.19.0.50") {
		t.Error("the rejected Service's ClusterIP is programmed")
	}
}
