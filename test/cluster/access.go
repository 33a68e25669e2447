package cluster

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// serviceAccountTokenTTL is how long ServiceAccount tokens last: longer than any test or
// benchmark run.
const serviceAccountTokenTTL = 6 * time.Hour

// Access is one identity's way into the API server: where it is, the CA to trust, and a bearer
// token. It turns into a rest.Config or a kubeconfig file, the two forms a daemon takes.
type Access struct {
	// Server is the https URL clients dial.
	Server string
	// CAData is the PEM CA certificate that signed the serving certificate.
	CAData []byte
	// Token is the bearer token.
	Token string
	// User names the identity in kubeconfig files (for reading them; the server ignores it).
	User string
}

// RESTConfig is a client-go configuration for a.
func (a Access) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            a.Server,
		BearerToken:     a.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: a.CAData},
	}
}

// Kubeconfig is a kubeconfig document with a as its only context, the current one.
func (a Access) Kubeconfig() ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: a.Server, CertificateAuthorityData: a.CAData}
	cfg.AuthInfos[a.User] = &clientcmdapi.AuthInfo{Token: a.Token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: a.User}
	cfg.CurrentContext = "test"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig for %s: %w", a.User, err)
	}
	return b, nil
}

// WriteKubeconfig writes a's kubeconfig to path, readable by its owner only.
func (a Access) WriteKubeconfig(path string) error {
	b, err := a.Kubeconfig()
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

func (a Access) httpClient() (*http.Client, error) {
	tc, err := tlsConfig(a.CAData)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}, nil
}

// ServiceAccount makes the identity a DaemonSet pod would have: it creates namespace and the
// ServiceAccount name in it (if missing), binds the ServiceAccount to clusterRole with a
// ClusterRoleBinding, and returns a token issued through the TokenRequest API. The ClusterRole
// itself is the caller's (e.g. from deploy/); binding one that does not exist yet is allowed.
func (c *Cluster) ServiceAccount(t testing.TB, namespace, name, clusterRole string) Access {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := c.serviceAccount(ctx, namespace, name, clusterRole)
	if err != nil {
		t.Fatalf("service account %s/%s: %v", namespace, name, err)
	}
	return a
}

func (c *Cluster) serviceAccount(ctx context.Context, namespace, name, clusterRole string) (Access, error) {
	cs := c.Client()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return Access{}, fmt.Errorf("create namespace: %w", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return Access{}, fmt.Errorf("create service account: %w", err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test:" + namespace + ":" + name + ":" + clusterRole},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: namespace, Name: name}},
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return Access{}, fmt.Errorf("bind cluster role %s: %w", clusterRole, err)
	}
	ttl := int64(serviceAccountTokenTTL / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		return Access{}, fmt.Errorf("token request: %w", err)
	}
	return Access{
		Server: c.URL,
		CAData: c.admin.CAData,
		Token:  tr.Status.Token,
		User:   "system:serviceaccount:" + namespace + ":" + name,
	}, nil
}
