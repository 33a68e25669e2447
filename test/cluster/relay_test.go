package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nftproxy/nftproxy/test/netns"
)

// The relay test re-runs this test binary inside a namespace as a small client: with helperEnv
// set to a kubeconfig path, TestMain runs helperMain instead of the tests.
const (
	helperEnv       = "NFTPROXY_CLUSTER_HELPER_KUBECONFIG"
	helperDirectEnv = "NFTPROXY_CLUSTER_HELPER_DIRECT"
)

// helperMain lists Services with the kubeconfig in helperEnv and prints their names, one a
// line. With helperDirectEnv set to host:port it first reports whether that address answers
// (it must not: the namespace has its own loopback).
func helperMain() int {
	if addr := os.Getenv(helperDirectEnv); addr != "" {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			c.Close()
			fmt.Println("direct: reachable")
		} else {
			fmt.Println("direct: unreachable")
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(helperEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := cs.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, s := range list.Items {
		fmt.Println("service:", s.Namespace+"/"+s.Name)
	}
	return 0
}

// A process started inside a test namespace cannot dial the API server's own address, but with
// the kubeconfig KubeconfigFor writes it lists Services, as a ServiceAccount, over verified TLS.
func TestRelayFromNetns(t *testing.T) {
	netns.Skip(t)
	c := Start(t, Options{})
	ns := netns.New(t, "cluster")
	ctx := ctxFor(t)
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "test-service-reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list"}}},
	}
	if _, err := c.Client().RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client().CoreV1().Services("default").Create(ctx, webService("relayed"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := c.KubeconfigFor(t, ns, c.ServiceAccount(t, "kube-system", "nftproxy", role.Name))
	if again := c.Relay(t, ns); !strings.Contains(mustRead(t, kubeconfig), again) {
		t.Errorf("Relay(%s) = %s, not the server in the kubeconfig", ns.Name, again)
	}

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := ns.Command(self)
	cmd.Env = append(os.Environ(), helperEnv+"="+kubeconfig, helperDirectEnv+"="+strings.TrimPrefix(c.URL, "https://"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("client in %s: %v\n%s", ns.Name, err, out)
	}
	for _, want := range []string{"direct: unreachable", "service: default/relayed", "service: default/kubernetes"} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("client in %s printed:\n%s\nwant a line %q", ns.Name, out, want)
		}
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// RelaySamePort gives every namespace the API server's own URL, so one address in a ConfigMap
// serves nodes that are namespaces; a client inside each reaches /readyz through it.
func TestRelaySamePort(t *testing.T) {
	netns.Skip(t)
	c := Start(t, Options{})
	for _, name := range []string{"node-a", "node-b"} {
		ns := netns.New(t, name)
		if url := c.RelaySamePort(t, ns); url != c.URL {
			t.Errorf("RelaySamePort(%s) = %s, want the API server's %s", ns.Name, url, c.URL)
		}
		hc, err := c.admin.httpClient()
		if err != nil {
			t.Fatal(err)
		}
		hc.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = ns.Do(func() error {
				var d net.Dialer
				conn, err = d.DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		}
		if _, err := get(ctxFor(t), hc, c.URL+"/readyz", c.admin.Token); err != nil {
			t.Errorf("/readyz from inside %s: %v", ns.Name, err)
		}
	}
}
