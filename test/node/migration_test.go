package node

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/nftproxy/nftproxy/test/cluster"
	"github.com/nftproxy/nftproxy/test/lab"
)

// kube-proxy as kubeadm deploys it: a DaemonSet in kube-system, its kubeconfig in a ConfigMap,
// its ServiceAccount bound to the bootstrap ClusterRole system:node-proxier.
const (
	kubeProxyName     = "kube-proxy"
	kubeProxySelector = "k8s-app=kube-proxy"
	kubeProxyHealthz  = 10256
	kpTable           = "table ip kube-proxy"
	npTable           = "table ip nftproxy"
)

// TestMigrationFromKubeProxy follows deploy/MIGRATION.md on a real node: kube-proxy (the newest
// release test/cluster builds, nftables mode) serves as a DaemonSet pod; then, under traffic,
// step 2 applies nftproxy's overlay beside it and waits for the pod Ready, step 4 takes
// kube-proxy's pods away with the guide's nodeSelector patch, step 5 runs the guide's cleanup
// DaemonSet (`nftproxy cleanup --kube-proxy` on the node), step 6 deletes kube-proxy's
// DaemonSet. New TCP and UDP connections (client to a LoadBalancer IP, node to a ClusterIP),
// long-lived ones, and probes of the health-check node port of an externalTrafficPolicy=Local
// LoadBalancer are counted per step: one failed connection, answer from a wrong backend,
// broken long-lived connection or probe not answered 200 fails the test. Then the guide's
// rollback under the same traffic: kube-proxy re-created beside nftproxy, nftproxy's objects
// deleted, its tables removed by deploy/migrate's cleanup DaemonSet.
func TestMigrationFromKubeProxy(t *testing.T) {
	e := start(t)
	t.Cleanup(func() { e.figures.print(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	e.importKubeProxy(ctx, t)
	e.createBackends(ctx, t)
	e.deployKubeProxy(ctx, t)
	cip, _ := e.serviceAddrs(ctx, t, "web")
	hc := e.healthCheckURL(ctx, t, "web-local")
	// kube-proxy alone serves every kind of traffic the handover carries, before it starts.
	e.checkTables(t, "with kube-proxy alone", []string{kpTable}, []string{npTable})
	e.waitServed(ctx, cip, hc)

	tr := e.startTraffic(ctx, cip)
	const exitPhase = "4. kube-proxy stopped"
	hcp := e.probeHealthCheck(tr, hc, exitPhase)
	defer func() {
		tr.Stop()
		// The load has stopped: nothing else reads or writes the counts.
		t.Logf("health-check probes reset by the exiting kube-proxy (not counted as failed): %v", hcp.resets)
		for _, kind := range []string{"long-lived tcp client->LB", "long-lived udp client->LB"} {
			broken := 0
			for _, phase := range tr.f.phases {
				if c := tr.f.counts[phase][kind]; c != nil {
					broken += c.failed
				}
			}
			t.Logf("%s: kept through every phase: %v (%d probes failed)", kind, broken == 0, broken)
		}
		if failed, attempted := tr.f.failed("between phases"); failed > 0 {
			t.Errorf("between phases: %d of %d failed; first: %s", failed, attempted, strings.Join(tr.fails["between phases"], "; "))
		}
		t.Logf("answers from a wrong backend per phase (counted as failed): %v", tr.wrong)
	}()
	tr.runPhase(t, "1. kube-proxy alone", func() { time.Sleep(3 * time.Second) })
	tr.runPhase(t, "2. nftproxy beside kube-proxy", func() {
		e.deploy(ctx, tagOld)
		e.waitDaemonPods(ctx, t, tagOld, nil)
		e.checkTables(t, "with both running", []string{kpTable, npTable}, nil)
	})
	tr.runPhase(t, exitPhase, func() {
		patch := `{"spec":{"template":{"spec":{"nodeSelector":{"nftproxy.io/no-kube-proxy":"true"}}}}}`
		if _, err := e.cs.AppsV1().DaemonSets(dsNamespace).Patch(ctx, kubeProxyName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitPodsGone(ctx, "kube-proxy", kubeProxySelector)
	})
	tr.runPhase(t, "5. cleanup --kube-proxy", func() {
		e.runCleanup(ctx, t, "cleanup-kube-proxy.yaml", "nftproxy-cleanup-kube-proxy")
		e.checkTables(t, "after cleanup --kube-proxy", []string{npTable}, []string{kpTable, "table ip6 kube-proxy"})
	})
	tr.runPhase(t, "6. kube-proxy DaemonSet deleted", func() {
		if err := e.cs.AppsV1().DaemonSets(dsNamespace).Delete(ctx, kubeProxyName, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() || os.Getenv("NFTPROXY_NODE_NO_ROLLBACK") != "" {
		return
	}

	// The guide's rollback, after step 6: kube-proxy re-created beside nftproxy, nftproxy's
	// objects deleted (`kubectl delete -k`), its tables removed.
	tr.runPhase(t, "R1. kube-proxy back beside nftproxy", func() {
		e.deployKubeProxy(ctx, t)
		e.checkTables(t, "with both running", []string{kpTable, npTable}, nil)
		port := strings.TrimSuffix(hc[strings.LastIndex(hc, ":")+1:], "/")
		e.waitFor(ctx, "kube-proxy holding the health-check node port", func() (bool, string) {
			out, err := e.node.NS.Run("ss", "-Htlnp", "sport = :"+port)
			return err == nil && strings.Contains(out, "kube-proxy"), fmt.Sprint(out, err)
		})
	})
	tr.runPhase(t, "R2. nftproxy deleted", func() {
		if err := cluster.Delete(ctx, e.c.Config(), e.overlayObjects(tagOld)); err != nil {
			t.Fatal(err)
		}
		e.waitPodsGone(ctx, "nftproxy", dsSelector)
	})
	tr.runPhase(t, "R3. cleanup of nftproxy's tables", func() {
		e.runCleanup(ctx, t, "cleanup-nftproxy.yaml", "nftproxy-cleanup")
		e.checkTables(t, "after nftproxy cleanup", []string{kpTable}, []string{npTable, "table ip6 nftproxy"})
	})
}

// importKubeProxy builds kube-proxy's image from the cached binary and imports it on every
// node.
func (e *env) importKubeProxy(ctx context.Context, t *testing.T) {
	bin, err := e.c.Binaries.KubeProxyAt(cluster.KubeProxyLatestVersion)
	if err != nil {
		t.Fatal(err)
	}
	archive, err := BuildKubeProxyImage(ctx, t.TempDir(), bin, cluster.KubeProxyLatestVersion)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range e.nodes {
		if err := n.ImportImage(ctx, archive); err != nil {
			t.Fatal(err)
		}
	}
}

// deployKubeProxy creates kube-proxy's ServiceAccount, binding, kubeconfig and DaemonSet
// (hostNetwork, privileged, nftables mode) and waits for its pod Ready on every node.
func (e *env) deployKubeProxy(ctx context.Context, t *testing.T) {
	sa := "/var/run/secrets/kubernetes.io/serviceaccount/"
	kubeconfig := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: default, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: default, user: {tokenFile: %q}}]
contexts: [{name: default, context: {cluster: default, user: default}}]
current-context: default
`, e.apiURL, sa+"ca.crt", sa+"token")
	create := func(err error) {
		t.Helper()
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	_, err := e.cs.CoreV1().ServiceAccounts(dsNamespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName}}, metav1.CreateOptions{})
	create(err)
	_, err = e.cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nftproxy-node:kube-proxy"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: dsNamespace, Name: kubeProxyName}},
	}, metav1.CreateOptions{})
	create(err)
	_, err = e.cs.CoreV1().ConfigMaps(dsNamespace).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName}, Data: map[string]string{"kubeconfig.conf": kubeconfig},
	}, metav1.CreateOptions{})
	create(err)
	labels := map[string]string{"k8s-app": kubeProxyName}
	privileged := true
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: dsNamespace, Name: kubeProxyName, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					HostNetwork:        true,
					ServiceAccountName: kubeProxyName,
					PriorityClassName:  "system-node-critical",
					Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					Containers: []corev1.Container{{
						Name:            kubeProxyName,
						Image:           KubeProxyImage + ":" + cluster.KubeProxyLatestVersion,
						ImagePullPolicy: corev1.PullNever,
						Args: []string{"--proxy-mode=nftables", "--kubeconfig=/var/lib/kube-proxy/kubeconfig.conf",
							"--hostname-override=$(NODE_NAME)", "--cluster-cidr=" + ClusterCIDR,
							fmt.Sprintf("--healthz-bind-address=0.0.0.0:%d", kubeProxyHealthz),
							"--metrics-bind-address=127.0.0.1:10249", "--conntrack-max-per-core=0", "--v=2"},
						Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
							FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}},
						SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
						VolumeMounts:    []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
								Path: "/healthz", Port: intstr.FromInt32(kubeProxyHealthz)}},
							PeriodSeconds: 1,
						},
					}},
					Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: kubeProxyName}}}}},
				},
			},
		},
	}
	if _, err := e.cs.AppsV1().DaemonSets(dsNamespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(ctx, "a kube-proxy pod Ready on every node", func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: kubeProxySelector})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		var states []string
		for i := range pods.Items {
			if podReady(&pods.Items[i]) {
				ready++
			}
			states = append(states, podState(&pods.Items[i]))
		}
		return ready == len(e.nodes), strings.Join(states, "; ")
	})
}

// healthCheckURL is the health-check node port of Service name on the first node, as a load
// balancer probes it.
func (e *env) healthCheckURL(ctx context.Context, t *testing.T, name string) string {
	s, err := e.cs.CoreV1().Services(appNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Spec.HealthCheckNodePort == 0 {
		t.Fatalf("Service %s has no healthCheckNodePort", name)
	}
	return fmt.Sprintf("http://%s:%d/", NodeIP(1), s.Spec.HealthCheckNodePort)
}

// healthCheck is one probe of a health-check node port from the client, each on a new
// connection: "" when answered 200, else what happened.
func (e *env) healthCheck(url string) string {
	resp, err := e.node.Client.HTTPClient(2 * time.Second).Get(url)
	if err != nil {
		return err.Error()
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.Status
	}
	return ""
}

// waitServed waits until the traffic's targets answer: web's ClusterIP from the node, the
// LoadBalancers from the client, the health-check node port 200.
func (e *env) waitServed(ctx context.Context, cip, hc string) {
	for _, target := range []struct {
		from, addr string
	}{{"node", cip + ":80"}, {"client", lbWeb + ":80"}, {"client", lbSteady + ":80"}} {
		ns := e.node.NS
		if target.from == "client" {
			ns = e.node.Client
		}
		e.waitFor(ctx, target.from+" to "+target.addr+" answered", func() (bool, string) {
			r := lab.Dialer{Timeout: 2 * time.Second}.Dial(ctx, ns, "tcp", target.addr)
			return r.Outcome == lab.Replied, r.String()
		})
	}
	e.waitFor(ctx, "health-check node port answered 200", func() (bool, string) {
		got := e.healthCheck(hc)
		return got == "", got
	})
}

// hcProber probes a health-check node port every 100 ms as a load balancer does, each probe on
// a new connection; anything but 200 fails its phase, except a reset in the phase where the
// holder of the port exits without draining (kube-proxy: a probe it had accepted, or that
// waited in its listen queue, when it was killed is reset, which the guide says; no probe
// may be refused or go unanswered).
type hcProber struct {
	tr        *traffic
	exitPhase string         // the phase in which kube-proxy exits
	resets    map[string]int // phase -> tolerated resets
}

const hcKind = "hc probe client->node-1"

func (e *env) probeHealthCheck(tr *traffic, url, exitPhase string) *hcProber {
	p := &hcProber{tr: tr, exitPhase: exitPhase, resets: map[string]int{}}
	tr.every(100*time.Millisecond, func() {
		phase := tr.current()
		got := e.healthCheck(url)
		reset := strings.Contains(got, "connection reset by peer") || strings.HasSuffix(got, ": EOF")
		if reset && phase == p.exitPhase {
			tr.mu.Lock()
			p.resets[phase]++
			tr.mu.Unlock()
			got = ""
		}
		tr.count(phase, hcKind, got != "", got)
	})
	return p
}

// runCleanup applies one of deploy/migrate's cleanup DaemonSets (file, named name) with the
// tier's images (the guide says its image is the overlay's), waits until its init container
// exited 0 and its pod is Ready on every node, then deletes it, as the guide does. The
// caller checks the tables.
func (e *env) runCleanup(ctx context.Context, t *testing.T, file, name string) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "migrate", file))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if u.GetKind() != "DaemonSet" || u.GetName() != name {
		t.Fatalf("%s: %s %s, want DaemonSet %s", file, u.GetKind(), u.GetName(), name)
	}
	spec := []string{"spec", "template", "spec"}
	for field, image := range map[string]string{"initContainers": NftproxyRepo + ":" + tagOld, "containers": PauseImage} {
		cs, _, err := unstructured.NestedSlice(u.Object, append(spec, field)...)
		if err != nil || len(cs) != 1 {
			t.Fatalf("%s: want one of %s: %v", file, field, err)
		}
		cs[0].(map[string]any)["image"] = image
		if err := unstructured.SetNestedSlice(u.Object, cs, append(spec, field)...); err != nil {
			t.Fatal(err)
		}
	}
	objs := []*unstructured.Unstructured{u}
	if err := cluster.Apply(ctx, e.c.Config(), objs, "kubectl", false); err != nil {
		t.Fatal(err)
	}
	e.waitFor(ctx, name+" pod Ready on every node", func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + name})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		var states []string
		for i := range pods.Items {
			p := &pods.Items[i]
			states = append(states, podState(p))
			for _, s := range p.Status.InitContainerStatuses {
				if s.State.Terminated != nil && s.State.Terminated.ExitCode != 0 {
					t.Fatalf("pod %s: the cleanup exited %d: %s", p.Name, s.State.Terminated.ExitCode, s.State.Terminated.Message)
				}
			}
			if podReady(p) {
				ready++
			}
		}
		return ready == len(e.nodes), strings.Join(states, "; ")
	})
	if err := cluster.Delete(ctx, e.c.Config(), objs); err != nil {
		t.Fatal(err)
	}
}

// checkTables fails t unless every node has the tables of want and none of notWant
// (`nft list tables` lines, "table ip kube-proxy").
func (e *env) checkTables(t *testing.T, when string, want, notWant []string) {
	t.Helper()
	for _, n := range e.nodes {
		out, err := n.NS.Run("nft", "list", "tables")
		if err != nil {
			t.Fatalf("%s: nft list tables: %v", n.Name, err)
		}
		for _, w := range want {
			if !strings.Contains(out, w+"\n") {
				t.Errorf("%s %s: no %q in:\n%s", n.Name, when, w, out)
			}
		}
		for _, w := range notWant {
			if strings.Contains(out, w+"\n") {
				t.Errorf("%s %s: %q left in:\n%s", n.Name, when, w, out)
			}
		}
	}
}

// waitPodsGone waits until no pod matches selector in kube-system.
func (e *env) waitPodsGone(ctx context.Context, what, selector string) {
	e.waitFor(ctx, what+" pods gone", func() (bool, string) {
		pods, err := e.cs.CoreV1().Pods(dsNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err.Error()
		}
		return len(pods.Items) == 0, fmt.Sprintf("%d pods", len(pods.Items))
	})
}
