package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The address plan the API server is started with; it matches test/lab's (ServiceCIDRv4/V6).
// The API server gives the first address of each range to the `default/kubernetes` Service, so
// tests must not ask for 198.19.0.1 or fd00:19::1.
const (
	ServiceCIDRv4 = "198.19.0.0/18"
	ServiceCIDRv6 = "fd00:19::/112"
	NodePortRange = "30000-32767"
)

// Bounds on start-up waits. Generous: they only matter when something is broken, and a cold
// cache or a loaded CI machine slows the first start.
const (
	etcdReadyTimeout      = 60 * time.Second
	apiserverReadyTimeout = 120 * time.Second
	stopGrace             = 15 * time.Second
	startAttempts         = 3
)

// Options shape a cluster. The zero value is a dual-stack cluster with the default ranges.
type Options struct {
	// SingleStack leaves the IPv6 service range out.
	SingleStack bool
	// NodePortRange overrides --service-node-port-range (default NodePortRange).
	NodePortRange string
	// APIServerArgs are appended to kube-apiserver's flags (later flags win).
	APIServerArgs []string
}

// Cluster is an etcd and a kube-apiserver running on 127.0.0.1 for one test.
type Cluster struct {
	// URL is the API server's address (https://127.0.0.1:PORT).
	URL string
	// AdminKubeconfig is a kubeconfig file for a system:masters identity.
	AdminKubeconfig string
	// EtcdURL is etcd's client address (http, no auth).
	EtcdURL string
	// Binaries are the executables the cluster runs, kube-proxy included for peers.
	Binaries Paths

	dir       string
	pki       *pki
	admin     Access
	client    kubernetes.Interface
	etcd      *process
	apiserver *process
	logf      func(format string, args ...any) // the starting test's t.Logf
	apiPort   int

	mu     sync.Mutex
	relays map[string]*relay // by namespace name
}

// Skip skips t when the cluster tier is turned off: NFTPROXY_UNIT_ONLY (`make unit`),
// NFTPROXY_SKIP_CLUSTER (a developer who does not want the first build), or -short.
func Skip(t testing.TB) {
	t.Helper()
	switch {
	case os.Getenv("NFTPROXY_UNIT_ONLY") != "":
		t.Skip("NFTPROXY_UNIT_ONLY is set: cluster tier skipped")
	case os.Getenv("NFTPROXY_SKIP_CLUSTER") != "":
		t.Skip("NFTPROXY_SKIP_CLUSTER is set: cluster tier skipped")
	case testing.Short():
		t.Skip("-short: cluster tier skipped")
	}
}

// Start builds or reuses the binaries, starts etcd and kube-apiserver with fresh data and keys
// under t.TempDir, waits until /readyz answers ok, and stops both when t ends. It fails t on
// any error, with the tail of the failing server's log.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	Skip(t)
	ctx, cancel := testContext(t)
	defer cancel()
	paths, err := Prepare(ctx, logWriter{t})
	if err != nil {
		t.Fatalf("cluster binaries: %v", err)
	}
	c := &Cluster{Binaries: paths, dir: t.TempDir(), relays: map[string]*relay{}, logf: t.Logf}
	t.Cleanup(func() {
		for _, p := range []*process{c.apiserver, c.etcd} {
			if p == nil {
				continue
			}
			if t.Failed() {
				t.Log(p.tail(30))
			}
			if p.stop(stopGrace) {
				t.Log(p.slowStop(stopGrace))
			}
		}
	})
	start := time.Now()
	if err := c.start(ctx, opts); err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Logf("cluster: etcd and kube-apiserver %s ready at %s in %s", KubeVersion, c.URL, time.Since(start).Round(time.Millisecond))
	return c
}

// testContext bounds set-up by the test's deadline, when it has one.
func testContext(t testing.TB) (context.Context, context.CancelFunc) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			return context.WithDeadline(context.Background(), dl)
		}
	}
	return context.WithCancel(context.Background())
}

// logWriter sends build progress lines to the test log.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func (c *Cluster) start(ctx context.Context, opts Options) error {
	var err error
	if c.pki, err = newPKI(c.dir); err != nil {
		return err
	}
	token, err := randomToken()
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(c.dir, "tokens.csv")
	if err := os.WriteFile(tokenFile, []byte(token+`,nftproxy-admin,nftproxy-admin,"system:masters"`+"\n"), 0o600); err != nil {
		return err
	}
	if err := c.startEtcd(ctx); err != nil {
		return err
	}
	if err := c.startAPIServer(ctx, opts, tokenFile, token); err != nil {
		return err
	}
	c.AdminKubeconfig = filepath.Join(c.dir, "admin.kubeconfig")
	if err := c.admin.WriteKubeconfig(c.AdminKubeconfig); err != nil {
		return err
	}
	if c.client, err = kubernetes.NewForConfig(c.Config()); err != nil {
		return fmt.Errorf("admin clientset: %w", err)
	}
	// The API server creates the default namespace shortly after it is ready; tests should not
	// race it.
	_, err = c.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("namespace default: %w", err)
	}
	// So is the default/kubernetes Service (its controller runs after /readyz): a test that
	// lists Services at once must find it, as on any real cluster.
	for {
		_, err := c.client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsNotFound(err) {
			return fmt.Errorf("Service default/kubernetes: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the API server did not create Service default/kubernetes: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	extra, err := etcdCompatFlags(c.Binaries.Etcd)
	if err != nil {
		return err
	}
	c.etcd = &process{name: "etcd", path: c.Binaries.Etcd, logFile: filepath.Join(c.dir, "etcd.log")}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return err
		}
		client, peer := "http://"+hostPort(ports[0]), "http://"+hostPort(ports[1])
		c.etcd.args = append([]string{
			"--name=test",
			"--data-dir=" + filepath.Join(c.dir, "etcd"),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=test=" + peer,
		}, extra...)
		c.EtcdURL = client
		if err := c.etcd.start(); err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, etcdReadyTimeout)
		err = c.etcd.waitReady(wctx, c.etcdHealthy)
		cancel()
		if err == nil {
			return nil
		}
		_ = c.etcd.stop(stopGrace)
		if attempt == startAttempts || !c.etcd.addrInUse() {
			return err
		}
		os.RemoveAll(filepath.Join(c.dir, "etcd"))
	}
}

// etcdCompatFlags adapts to the etcd binary: the one we build (3.5) skips fsync, which tests do
// not need; Debian's 3.4 (NFTPROXY_ETCD) needs progress notifications or the API server's
// watches stall.
func etcdCompatFlags(path string) ([]string, error) {
	out, err := exec.Command(path, "--version").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w: %s", path, err, out)
	}
	switch v := string(out); {
	case strings.Contains(v, "etcd Version: 3.4."):
		return []string{"--experimental-watch-progress-notify-interval=1s"}, nil
	case strings.Contains(v, "etcd Version: 3.5."):
		return []string{"--unsafe-no-fsync"}, nil
	}
	return nil, nil
}

func (c *Cluster) etcdHealthy(ctx context.Context) error {
	body, err := get(ctx, http.DefaultClient, c.EtcdURL+"/health", "")
	if err != nil {
		return err
	}
	if !strings.Contains(body, `"health":"true"`) {
		return fmt.Errorf("%w: /health says %s", errNotReady, body)
	}
	return nil
}

func (c *Cluster) startAPIServer(ctx context.Context, opts Options, tokenFile, token string) error {
	ranges := ServiceCIDRv4
	if !opts.SingleStack {
		ranges += "," + ServiceCIDRv6
	}
	nodePorts := opts.NodePortRange
	if nodePorts == "" {
		nodePorts = NodePortRange
	}
	c.apiserver = &process{name: "kube-apiserver", path: c.Binaries.KubeAPIServer, logFile: filepath.Join(c.dir, "kube-apiserver.log")}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		c.apiPort = ports[0]
		c.URL = "https://" + hostPort(c.apiPort)
		c.admin = Access{Server: c.URL, CAData: c.pki.caPEM, Token: token, User: "nftproxy-admin"}
		c.apiserver.args = append([]string{
			"--etcd-servers=" + c.EtcdURL,
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(c.apiPort),
			"--cert-dir=" + filepath.Join(c.dir, "certs"),
			"--tls-cert-file=" + c.pki.certFile,
			"--tls-private-key-file=" + c.pki.keyFile,
			"--token-auth-file=" + tokenFile,
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc",
			"--service-account-key-file=" + c.pki.saPubFile,
			"--service-account-signing-key-file=" + c.pki.saKeyFile,
			"--service-cluster-ip-range=" + ranges,
			"--service-node-port-range=" + nodePorts,
			"--endpoint-reconciler-type=none",
			"--allow-privileged=true",
			"--profiling=false",
		}, opts.APIServerArgs...)
		err = c.runAPIServer(ctx)
		if err == nil || attempt == startAttempts || !c.apiserver.addrInUse() {
			return err
		}
	}
}

// runAPIServer starts kube-apiserver with its current flags and waits for /readyz.
func (c *Cluster) runAPIServer(ctx context.Context) error {
	if err := c.apiserver.start(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, apiserverReadyTimeout)
	defer cancel()
	hc, err := c.admin.httpClient()
	if err != nil {
		return err
	}
	err = c.apiserver.waitReady(wctx, func(ctx context.Context) error {
		_, err := get(ctx, hc, c.URL+"/readyz", c.admin.Token)
		return err
	})
	if err != nil {
		_ = c.apiserver.stop(stopGrace)
	}
	return err
}

// Stop stops kube-apiserver and leaves etcd and its data: an API outage. Restart ends it. It
// returns once the server has exited; one that had to be killed after its grace period is
// logged, not an error.
func (c *Cluster) Stop() { c.stopAPIServer() }

func (c *Cluster) stopAPIServer() {
	if c.apiserver.stop(stopGrace) {
		c.logf("%s", c.apiserver.slowStop(stopGrace))
	}
}

// Restart starts kube-apiserver again on the same address with the same flags and keys (so
// tokens and kubeconfigs stay valid) and waits for /readyz. It stops a running one first.
func (c *Cluster) Restart(ctx context.Context) error {
	c.stopAPIServer()
	return c.runAPIServer(ctx)
}

// Running reports whether kube-apiserver runs (between Stop and Restart it does not).
func (c *Cluster) Running() bool { return c.apiserver.running() }

// Admin is the system:masters identity.
func (c *Cluster) Admin() Access { return c.admin }

// Config is a client configuration for the admin identity.
func (c *Cluster) Config() *rest.Config { return c.admin.RESTConfig() }

// Client is a clientset for the admin identity.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Dir is the cluster's working folder (keys, kubeconfigs, logs); removed when the test ends.
func (c *Cluster) Dir() string { return c.dir }

func randomToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// get fetches url with an optional bearer token and returns the body; a non-200 status is an
// error carrying the body (readyz lists the checks that fail).
func get(ctx context.Context, hc *http.Client, url, token string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%w: GET %s: %s: %s", errNotReady, url, resp.Status, strings.TrimSpace(string(b)))
	}
	return string(b), nil
}

// tlsConfig trusts only the cluster's CA.
func tlsConfig(caPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no CA certificate in PEM")
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// ServiceAccountSigningKeyFile is the PEM private key the API server signs ServiceAccount
// tokens with: a kube-controller-manager given it (--service-account-private-key-file) issues
// tokens the API server accepts.
func (c *Cluster) ServiceAccountSigningKeyFile() string { return c.pki.saKeyFile }

// Port is the API server's port on 127.0.0.1.
func (c *Cluster) Port() int { return c.apiPort }
