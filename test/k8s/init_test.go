package k8s

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/netns"
)

// The DaemonSet's privileged initContainer runs `nftproxy init` (kube-proxy's --init-only) with
// kube-proxy's conntrack defaults, while the daemon keeps only NET_ADMIN; its arguments, run in
// a fresh network namespace, set the per-namespace conntrack timeouts there (read back from
// that namespace's /proc/sys).
func TestDaemonSetInitContainerSetsConntrack(t *testing.T) {
	netns.Skip(t)
	objs := buildDeploy(t)
	ds, cm := daemonSetOf(t, objs)
	spec := ds.Spec.Template.Spec
	if len(spec.InitContainers) != 1 {
		t.Fatalf("DaemonSet: %d initContainers, want 1 (nftproxy init)", len(spec.InitContainers))
	}
	ic := spec.InitContainers[0]
	if sc := ic.SecurityContext; sc == nil || sc.Privileged == nil || !*sc.Privileged {
		t.Errorf("initContainer %s is not privileged: it cannot write /proc/sys", ic.Name)
	}
	if ic.Image != spec.Containers[0].Image {
		t.Errorf("initContainer image %q, want the daemon's %q", ic.Image, spec.Containers[0].Image)
	}
	sc := spec.Containers[0].SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Add, []corev1.Capability{"NET_ADMIN"}) || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("daemon securityContext %+v: want unprivileged, ALL dropped, NET_ADMIN only", sc)
	}
	args := containerArgs(t, ic, cm, fixture.NodeName)
	if len(args) == 0 || args[0] != "init" {
		t.Fatalf("initContainer args %q, want nftproxy init", args)
	}

	ns := netns.New(t, "nftp-dsinit")
	out, err := ns.Command(append([]string{daemonBinary}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nftproxy %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	// kube-proxy's defaults; a new namespace starts from the kernel's (432000 s and 60 s).
	for name, want := range map[string]string{"nf_conntrack_tcp_timeout_established": "86400", "nf_conntrack_tcp_timeout_close_wait": "3600"} {
		got, err := ns.Run("cat", "/proc/sys/net/netfilter/"+name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(got) != want {
			t.Errorf("%s = %s after the initContainer, want %s", name, strings.TrimSpace(got), want)
		}
	}
	t.Logf("nftproxy %s:\n%s", strings.Join(args, " "), out)
}
