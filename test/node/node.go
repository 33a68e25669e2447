package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// The address plan (198.18.0.0/15, as every tier's). The nodes and the client share one link,
// a bridge in the client's namespace, which stands for the rest of the network: it routes the
// Service ranges to the first node and forwards nothing itself. Node n (from 1) is
// 198.18.0.(2n-1) with pods in 198.18.(127+n).0/24 on its own bridge.
const (
	ClientIP = "198.18.0.2"
	// ClusterCIDR holds every node's pod range.
	ClusterCIDR = "198.18.128.0/23"
	// Bridge is the pods' bridge in a node's namespace; the CNI bridge plugin attaches pods
	// to it (the test creates it and gives it the gateway address).
	Bridge = "cbr0"
	// LAN is the bridge in the client's namespace that links the nodes and the client.
	LAN = "lan"
)

// NodeIP is node n's address (n from 1).
func NodeIP(n int) string { return fmt.Sprintf("198.18.0.%d", 2*n-1) }

// PodCIDR is node n's pod range, PodGateway its bridge's address.
func PodCIDR(n int) string    { return fmt.Sprintf("198.18.%d.0/24", 127+n) }
func PodGateway(n int) string { return fmt.Sprintf("198.18.%d.1", 127+n) }

// NodeName is node n's name.
func NodeName(n int) string { return fmt.Sprintf("node-%d", n) }

// Config is what a node runs.
type Config struct {
	// Index is the node's number (from 1); it decides its name, addresses and cgroup root.
	Index int
	// Name is the Node's name.
	Name string
	// Kubelet is the kubelet binary.
	Kubelet string
	// Dir is the node's private folder: containerd's root and state, the kubelet's root,
	// CNI configuration and IPAM state, logs. Short, since socket paths live in it.
	Dir string
	// APIServer is the API server's URL as seen from inside the node's namespace (a relay).
	APIServer string
	// CAFile verifies the API server; ClientCert and ClientKey are the kubelet's identity.
	CAFile, ClientCert, ClientKey string
	// Logf receives progress and teardown lines.
	Logf func(string, ...any)
}

// Node is a kubelet and containerd in a network namespace of their own (the node's), sharing
// a private mount namespace: pod mounts, the kubelet's bind mount of its root folder and the
// containers' root filesystems never appear in the host's mount table and vanish with the
// processes. The host keeps its own network: the node's interfaces are a veth to a client
// namespace and a bridge for pods, both inside the node's namespace.
type Node struct {
	Config
	// NS is the node's network namespace (hostNetwork pods share it); Client is a host
	// outside the node, on the node's uplink.
	NS, Client *netns.NS
	// Socket is containerd's private socket.
	Socket string

	host       *hostState
	containerd *proc
	kubelet    *proc
}

// cgroupTop is the cgroup folder, in every hierarchy, that holds the node's pods (the
// kubelet's cgroupRoot): one per node, so two kubelets never take each other's pods for
// orphans.
func (n *Node) cgroupTop() string { return fmt.Sprintf("nftnode-%d", n.Index) }

// NewNode records the host's state, creates the node's network (nodes is how many the
// cluster has, for the routes), starts containerd and returns the node; Teardown undoes it
// all. Call ImportImage, then StartKubelet.
func NewNode(ctx context.Context, cfg Config, ns, client *netns.NS, nodes int) (*Node, error) {
	n := &Node{Config: cfg, NS: ns, Client: client, Socket: filepath.Join(cfg.Dir, "containerd.sock")}
	var err error
	if n.host, err = recordHost(n.cgroupTop()); err != nil {
		return nil, err
	}
	if err := n.network(nodes); err != nil {
		return n, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return n, err
	}
	return n, nil
}

// network wires the node: eth0 on the client's LAN bridge, the pod bridge, routes to the
// other nodes' pod ranges (as a flat routed network would), forwarding on, and bridged frames
// through netfilter (as kubeadm asks).
func (n *Node) network(nodes int) error {
	ip, peer := NodeIP(n.Index), "to-"+n.Name
	steps := [][]string{
		{"ip", "-n", n.NS.Name, "link", "add", "eth0", "type", "veth", "peer", "name", peer, "netns", n.Client.Name},
		{"ip", "-n", n.Client.Name, "link", "set", peer, "master", LAN, "up"},
		{"ip", "-n", n.NS.Name, "addr", "add", ip + "/24", "dev", "eth0"},
		{"ip", "-n", n.NS.Name, "link", "set", "eth0", "up"},
		{"ip", "-n", n.NS.Name, "link", "add", Bridge, "type", "bridge"},
		{"ip", "-n", n.NS.Name, "addr", "add", PodGateway(n.Index) + "/24", "dev", Bridge},
		{"ip", "-n", n.NS.Name, "link", "set", Bridge, "up"},
		// A default route, so the node's own sockets can send to a Service address (a local
		// packet needs a route before the output hook DNATs it); the client drops the rest.
		{"ip", "-n", n.NS.Name, "route", "add", "default", "via", ClientIP},
	}
	for m := 1; m <= nodes; m++ {
		if m != n.Index {
			steps = append(steps, []string{"ip", "-n", n.NS.Name, "route", "add", PodCIDR(m), "via", NodeIP(m)})
		}
	}
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	sysctls := map[string]string{
		"net/ipv4/ip_forward":                    "1",
		"net/bridge/bridge-nf-call-iptables":     "1",
		"net/bridge/bridge-nf-call-ip6tables":    "1",
		"net/ipv4/conf/default/rp_filter":        "0",
		"net/ipv4/conf/all/rp_filter":            "0",
		"net/ipv4/conf/" + Bridge + "/rp_filter": "0",
	}
	for k, v := range sysctls {
		if _, err := n.NS.Run("sh", "-c", fmt.Sprintf("echo %s > /proc/sys/%s", v, k)); err != nil {
			return fmt.Errorf("node sysctl %s=%s: %w (bridge-nf-call-* needs br_netfilter)", k, v, err)
		}
	}
	return nil
}

// Client wires the client namespace: the LAN bridge with the client's address, and the
// Service ranges routed to the first node (as a router in front of a cluster would, to one of
// its nodes).
func Client(client *netns.NS) error {
	for _, s := range [][]string{
		{"ip", "-n", client.Name, "link", "add", LAN, "type", "bridge"},
		{"ip", "-n", client.Name, "addr", "add", ClientIP + "/24", "dev", LAN},
		{"ip", "-n", client.Name, "link", "set", LAN, "up"},
		{"ip", "-n", client.Name, "route", "add", "198.19.0.0/16", "via", NodeIP(1)},
	} {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// containerdConfig is containerd's configuration: everything under the node's folder, the
// locally imported pause image as the sandbox, runc with its state in the node's folder, the
// CNI bridge plugin from Debian's containernetworking-plugins.
func (n *Node) containerdConfig(runc string) string {
	d := n.Dir
	return fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  netns_mounts_under_state_dir = true
  # The kubelet asks for oom_score_adj -998 for sandboxes; without CAP_SYS_RESOURCE (a
  # container's bounding set, as on this tier's CI machines) runc cannot lower a score, and
  # every sandbox fails to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[7]q
        Root = %[8]q
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[9]q
`, filepath.Join(d, "containerd", "root"), filepath.Join(d, "containerd", "state"), n.Socket, n.Socket+".ttrpc",
		filepath.Join(d, "containerd", "opt"), PauseImage, runc, filepath.Join(d, "runc"), filepath.Join(d, "cni", "net.d"))
}

// cniConfig attaches pods to the test's bridge, addresses from PodCIDR (IPAM state in the
// node's folder), default route via the bridge; hairpin so a pod reaches itself through a
// Service, as the kubelet's own bridge networking set it.
func (n *Node) cniConfig() string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "nftproxy-node",
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": false,
    "ipMasq": false,
    "hairpinMode": true,
    "ipam": {
      "type": "host-local",
      "dataDir": %q,
      "ranges": [[{"subnet": %q, "rangeStart": "198.18.%[5]d.10", "rangeEnd": "198.18.%[5]d.250", "gateway": %[4]q}]],
      "routes": [{"dst": "0.0.0.0/0"}]
    }
  }]
}
`, Bridge, filepath.Join(n.Dir, "cni", "ipam"), PodCIDR(n.Index), PodGateway(n.Index), 127+n.Index)
}

// startContainerd starts containerd in a new private mount namespace, inside the node's
// network namespace, and waits until it answers.
func (n *Node) startContainerd(ctx context.Context) error {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("runc not found: install Debian's runc (test/deps.sh)")
	}
	for _, d := range []string{"containerd", "cni/net.d", "cni/ipam", "runc", "logs"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o755); err != nil {
			return err
		}
	}
	cfg := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(n.containerdConfig(runc)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "cni", "net.d", "10-bridge.conflist"), []byte(n.cniConfig()), 0o644); err != nil {
		return err
	}
	n.containerd, err = startProc("containerd", filepath.Join(n.Dir, "logs", "containerd.log"),
		"unshare", "--mount", "--propagation", "private",
		"nsenter", "--net=/run/netns/"+n.NS.Name, "containerd", "--config", cfg)
	if err != nil {
		return err
	}
	start := time.Now()
	for {
		if _, err := n.ctr(ctx, "version"); err == nil {
			n.Logf("%s: containerd up in %s", n.Name, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if !n.containerd.running() {
			return fmt.Errorf("containerd exited: %v\n%s", n.containerd.err, n.containerd.tail(30))
		}
		if time.Since(start) > 60*time.Second || ctx.Err() != nil {
			return fmt.Errorf("containerd did not answer on %s within 60s\n%s", n.Socket, n.containerd.tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ctr runs containerd's client against the node's containerd, namespace k8s.io (the CRI's).
func (n *Node) ctr(ctx context.Context, args ...string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(cctx, "ctr", append([]string{"-a", n.Socket, "-n", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// ImportImage loads an OCI archive into the node's containerd, as an operator without a
// registry would (`ctr -n k8s.io images import`).
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	_, err := n.ctr(ctx, "images", "import", archive)
	return err
}

// kubeletConfig is the KubeletConfiguration: cgroup v1 with the cgroupfs driver (no systemd
// here), containerd's private socket, every folder it may choose under the node's, serving
// on the node's loopback only, images never collected (they come from no registry).
func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /%[4]s
containerRuntimeEndpoint: unix://%[1]s
failSwapOn: false
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
makeIPTablesUtilChains: false
protectKernelDefaults: false
podLogsDir: %[2]q
volumePluginDir: %[3]q
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
resolvConf: /etc/resolv.conf
nodeStatusUpdateFrequency: 2s
evictionHard:
  memory.available: 50Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
`, n.Socket, filepath.Join(n.Dir, "pod-logs"), filepath.Join(n.Dir, "volume-plugins"), n.cgroupTop())
}

// StartKubelet starts the kubelet in the node's network and mount namespaces.
func (n *Node) StartKubelet() error {
	cfg := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte(n.kubeletConfig()), 0o644); err != nil {
		return err
	}
	kc := filepath.Join(n.Dir, "kubelet.kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: kubelet, user: {client-certificate: %q, client-key: %q}}]
contexts: [{name: test, context: {cluster: test, user: kubelet}}]
current-context: test
`, n.APIServer, n.CAFile, n.ClientCert, n.ClientKey)), 0o600); err != nil {
		return err
	}
	// The kubelet's device-plugin folder is fixed (/var/lib/kubelet/device-plugins) whatever its
	// root, and a kubelet empties it at start: each node gets its own, bind-mounted in the
	// node's private mount namespace, so two kubelets never remove each other's socket.
	dp, fixed := filepath.Join(n.Dir, "device-plugins"), "/var/lib/kubelet/device-plugins"
	for _, d := range []string{dp, fixed} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	mntNS := "--mount=/proc/" + strconv.Itoa(n.containerd.cmd.Process.Pid) + "/ns/mnt"
	if out, err := exec.Command("nsenter", mntNS, "mount", "--bind", dp, fixed).CombinedOutput(); err != nil {
		return fmt.Errorf("bind-mount the node's device-plugin folder: %w: %s", err, out)
	}
	var err error
	n.kubelet, err = startProc("kubelet", filepath.Join(n.Dir, "logs", "kubelet.log"),
		"nsenter", mntNS, "--net=/run/netns/"+n.NS.Name,
		// --cert-dir defaults to /var/lib/kubelet/pki whatever --root-dir says.
		n.Kubelet, "--config="+cfg, "--kubeconfig="+kc, "--root-dir="+filepath.Join(n.Dir, "kubelet"),
		"--cert-dir="+filepath.Join(n.Dir, "pki"),
		"--hostname-override="+n.Name, "--node-ip="+NodeIP(n.Index), "--v=1")
	return err
}

// KubeletRunning reports whether the kubelet process runs.
func (n *Node) KubeletRunning() bool { return n.kubelet != nil && n.kubelet.running() }

// Logs are the tails of the node's daemons' logs, for a failing test.
func (n *Node) Logs(lines int) string {
	var b strings.Builder
	for _, p := range []*proc{n.containerd, n.kubelet} {
		if p != nil {
			b.WriteString(p.tail(lines) + "\n")
		}
	}
	return b.String()
}

// PodPID is the host PID of a running container's first process, found through its cgroup
// (the cgroupfs driver names the folder after the container ID), so a test can enter the pod's
// network namespace through /proc.
func (n *Node) PodPID(containerID string) (int, error) {
	id := containerID
	if _, after, ok := strings.Cut(id, "://"); ok {
		id = after
	}
	var found string
	root := filepath.Join("/sys/fs/cgroup/pids", n.cgroupTop(), "kubepods")
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == id {
			found = p
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		return 0, fmt.Errorf("container %s: no cgroup under %s", id, root)
	}
	b, err := os.ReadFile(filepath.Join(found, "cgroup.procs"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("container %s: no process in %s", id, found)
	}
	return strconv.Atoi(f[0])
}

// Teardown stops everything the node started and restores the host: the kubelet, every
// container (runc, by its private state), the shims, containerd; the processes left in the
// kubepods cgroups, the cgroups, the node's folder, the paths the daemons write outside it and
// the kernel settings. Slowness is logged; what could not be restored is returned.
func (n *Node) Teardown() []error {
	var errs []error
	step := func(what string, f func()) {
		start := time.Now()
		f()
		if d := time.Since(start); d > 5*time.Second {
			n.Logf("%s teardown: %s took %s", n.Name, what, d.Round(time.Millisecond))
		}
	}
	start := time.Now()
	if n.kubelet != nil {
		step("stop kubelet", func() {
			if d, killed := n.kubelet.stop(10 * time.Second); killed {
				n.Logf("%s teardown: the kubelet did not stop within %s of SIGTERM; killed", n.Name, d.Round(time.Second))
			}
		})
	}
	step("delete containers", func() { n.deleteContainers() })
	step("kill shims", func() { n.killShims() })
	if n.containerd != nil {
		step("stop containerd", func() {
			if d, killed := n.containerd.stop(15 * time.Second); killed {
				n.Logf("%s teardown: containerd did not stop within %s of SIGTERM; killed", n.Name, d.Round(time.Second))
			}
		})
	}
	if n.host != nil {
		step("remove cgroups", func() {
			if k := n.host.killCgroupProcs(); k > 0 {
				n.Logf("%s teardown: killed %d processes left in the node's cgroups", n.Name, k)
			}
			if left := n.host.removeCgroups(30 * time.Second); len(left) > 0 {
				errs = append(errs, fmt.Errorf("cgroups left behind (busy): %v", left))
			}
		})
	}
	step("remove the node's folder", func() {
		if ms, _ := mountsUnder(n.Dir); len(ms) > 0 {
			errs = append(errs, fmt.Errorf("mounts leaked into the host's mount namespace (unmounting): %v", ms))
		}
		if err := removeTree(n.Dir); err != nil {
			errs = append(errs, err)
		}
	})
	if n.host != nil {
		changed, rerrs := n.host.restore()
		for _, c := range changed {
			n.Logf("%s teardown: restored %s", n.Name, c)
		}
		errs = append(errs, rerrs...)
	}
	n.Logf("%s teardown: %s", n.Name, time.Since(start).Round(time.Millisecond))
	return errs
}

// deleteContainers force-deletes every container in the node's runc state (one folder per
// containerd namespace), which kills its processes.
func (n *Node) deleteContainers() {
	nsDirs, _ := os.ReadDir(filepath.Join(n.Dir, "runc"))
	for _, d := range nsDirs {
		root := filepath.Join(n.Dir, "runc", d.Name())
		out, err := exec.Command("runc", "--root", root, "list", "-q").Output()
		if err != nil {
			continue
		}
		for _, id := range strings.Fields(string(out)) {
			if b, err := exec.Command("runc", "--root", root, "delete", "--force", id).CombinedOutput(); err != nil {
				n.Logf("%s teardown: runc delete %s: %v: %s", n.Name, id, err, b)
			}
		}
	}
}

// killShims kills the containerd shims serving the node's containerd (their command line
// names its socket); they outlive containerd by design.
func (n *Node) killShims() {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 0 && strings.Contains(args[0], "containerd-shim") && containsArg(args, n.Socket) {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				n.Logf("%s teardown: kill shim %d: %v", n.Name, pid, err)
			}
		}
	}
}

func containsArg(args []string, s string) bool {
	for _, a := range args {
		if a == s {
			return true
		}
	}
	return false
}
