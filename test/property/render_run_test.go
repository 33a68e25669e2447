package property

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nftproxy/nftproxy/cmd/nftproxy/app"
	"github.com/nftproxy/nftproxy/test/netns"
)

// reservedBindServices try to take the node's reserved ports on its own address (a
// LoadBalancer IP and an external IP that are the node's, as bare-metal LB controllers
// publish), among them the ports of the daemon's --healthz-bind-address and
// --metrics-bind-address when those are not the defaults (deploy/ moves them); one Service on a
// free port beside them. Node ports are fixed, so run and render assign nothing.
const reservedBindServices = `apiVersion: v1
kind: Node
metadata: {name: node-a}
status:
  addresses:
  - {type: InternalIP, address: 198.18.0.1}
  - {type: InternalIP, address: fd00::1}
---
apiVersion: v1
kind: Service
metadata: {name: on-healthz, namespace: res}
spec:
  type: LoadBalancer
  clusterIP: 198.19.0.21
  clusterIPs: [198.19.0.21]
  ports: [{name: h, protocol: TCP, port: 10266, nodePort: 30101}]
status: {loadBalancer: {ingress: [{ip: 198.18.0.1}]}}
---
apiVersion: v1
kind: Service
metadata: {name: on-metrics, namespace: res}
spec:
  clusterIP: 198.19.0.22
  clusterIPs: [198.19.0.22]
  externalIPs: [198.18.0.1]
  ports: [{name: m, protocol: TCP, port: 10265}]
---
apiVersion: v1
kind: Service
metadata: {name: on-ssh, namespace: res}
spec:
  type: LoadBalancer
  clusterIP: 198.19.0.23
  clusterIPs: [198.19.0.23]
  ports: [{name: s, protocol: TCP, port: 22, nodePort: 30102}]
status: {loadBalancer: {ingress: [{ip: 198.18.0.1}]}}
---
apiVersion: v1
kind: Service
metadata: {name: free, namespace: res}
spec:
  type: LoadBalancer
  clusterIP: 198.19.0.24
  clusterIPs: [198.19.0.24]
  ports: [{name: f, protocol: TCP, port: 8080, nodePort: 30103}]
status: {loadBalancer: {ingress: [{ip: 198.18.0.1}]}}
`

// TestRenderMatchesRunOnReservedPorts: for the same manifests and flags, the ruleset `render`
// prints is the one `run --once` programs, read back from the kernel — in particular where the
// reserved ports come from the servers' bind addresses rather than --reserved-ports, which
// render once did not take and so printed as programmed what run rejected.
func TestRenderMatchesRunOnReservedPorts(t *testing.T) {
	netns.Skip(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "all.yaml"), []byte(reservedBindServices), 0o644); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--manifests", dir, "--node-name", nodeName,
		"--cluster-cidr", clusterCIDRs[0].String() + "," + clusterCIDRs[1].String(),
		"--service-cidr", serviceCIDRs[0].String() + "," + serviceCIDRs[1].String(),
		"--reserved-ports", "22", "--healthz-bind-address", "0.0.0.0:10266", "--metrics-bind-address", "127.0.0.1:10265"}

	var out, errOut bytes.Buffer
	if code := app.Main(append([]string{"nftproxy", "render"}, flags...), &out, &errOut); code != 0 {
		t.Fatalf("nftproxy render exited %d: %s", code, clip(errOut.String(), 20))
	}
	for _, svc := range []string{"res/on-healthz", "res/on-metrics", "res/on-ssh"} {
		if !strings.Contains(out.String(), "# rejected service "+svc+" (") {
			t.Errorf("render does not list %s as rejected (its port is reserved)", svc)
		}
	}
	rendered := netns.New(t, "nftp-prop-rendered")
	if o, err := rendered.RunStdin(out.String(), "nft", "-f", "-"); err != nil {
		t.Fatalf("nft -f of the render output: %v %s", err, o)
	}

	ran := netns.New(t, "nftp-prop-ran")
	var code int
	errOut.Reset()
	if err := ran.Do(func() error {
		code = app.Main(append([]string{"nftproxy", "run", "--once"}, flags...), &bytes.Buffer{}, &errOut)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if code != 0 {
		t.Fatalf("nftproxy run --once exited %d: %s", code, clip(errOut.String(), 20))
	}
	want, err := rendered.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ran.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("run --once programmed a ruleset other than the one render prints:\nrun:\n%s\nrender:\n%s", clip(got, 400), clip(want, 400))
	}
	if !strings.Contains(got, "198.19.0.24 . tcp . 8080") {
		t.Error("the Service on a free port is not programmed: the comparison proves little")
	}
}
