package app

import (
	"fmt"
	"os"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nftproxy/nftproxy/proxy/k8s"
)

// Client-side rate limits towards the API server. Informers list once and then watch, so
// steady state needs almost nothing; the burst covers start-up and Event bursts.
const (
	kubeQPS   = 20
	kubeBurst = 40
)

// inCluster reports whether the process runs in a pod with a mounted ServiceAccount (the
// environment rest.InClusterConfig reads).
func inCluster() bool {
	return os.Getenv("KUBERNETES_SERVICE_HOST") != "" && os.Getenv("KUBERNETES_SERVICE_PORT") != ""
}

// kubeMode reports whether run should watch an API server rather than manifest files.
func (o *Options) kubeMode() bool {
	return o.Manifests == "" && (o.Kubeconfig != "" || o.Master != "" || inCluster())
}

// restConfig is the API client configuration: --kubeconfig when given; in a pod, the
// ServiceAccount's in-cluster config, its address replaced by --master when given (a node
// without a service proxy cannot reach the API server's ClusterIP yet); else --master alone.
func (o *Options) restConfig() (*rest.Config, error) {
	var (
		cfg *rest.Config
		err error
	)
	switch {
	case o.Kubeconfig == "" && inCluster():
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("in-cluster API config: %w (outside a pod, pass --kubeconfig)", err)
		}
		if o.Master != "" {
			cfg.Host = o.Master
		}
	default:
		cfg, err = clientcmd.BuildConfigFromFlags(o.Master, o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load --kubeconfig %q / --master %q: %w", o.Kubeconfig, o.Master, err)
		}
	}
	cfg.UserAgent = "nftproxy/" + Version
	cfg.QPS, cfg.Burst = kubeQPS, kubeBurst
	// Protobuf halves list sizes and decode time for Services and EndpointSlices; Events and
	// anything else fall back to JSON.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg, nil
}

// newKubeSource builds the Kubernetes source from the options.
func newKubeSource(o *Options, log logr.Logger) (source, error) {
	if o.NodeName == "" {
		return nil, fmt.Errorf("the node name is required in Kubernetes mode: pass --hostname-override (in a DaemonSet, from the downward API's spec.nodeName)")
	}
	cfg, err := o.restConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("API client for %s: %w", cfg.Host, err)
	}
	return k8s.New(k8s.Config{Client: client, NodeName: o.NodeName, ProxyName: o.ProxyName, Logger: log.WithName("kubernetes")})
}
