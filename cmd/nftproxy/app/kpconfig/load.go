// Package kpconfig reads kube-proxy's KubeProxyConfiguration (kubeproxy.config.k8s.io/v1alpha1,
// the file kubeadm keeps in the kube-proxy ConfigMap) and translates it into nftproxy's flags, so
// a cluster's existing configuration starts nftproxy unchanged. Every field is either mapped to a
// flag with the same behaviour, warned about (harmless where nftproxy runs: another mode's
// section, Windows settings) or refused with its name and the reason (a setting that would change
// what the node does in a way nftproxy cannot honour). Decoding is strict: an unknown or
// duplicated field is an error, not silently dropped.
package kpconfig

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/kube-proxy/config/v1alpha1"
)

// Load reads path and decodes it strictly (see Decode).
func Load(path string) (*v1alpha1.KubeProxyConfiguration, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read --config: %w", err)
	}
	cfg, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("--config %s: %w", path, err)
	}
	return cfg, nil
}

// Decode decodes a KubeProxyConfiguration (YAML or JSON) with the published v1alpha1 types. It
// must name apiVersion kubeproxy.config.k8s.io/v1alpha1 and kind KubeProxyConfiguration; an
// unknown field or a field given twice is an error naming it (kube-proxy falls back to lenient
// decoding with a log line; a typo would then silently keep a default, which nftproxy refuses).
func Decode(data []byte) (*v1alpha1.KubeProxyConfiguration, error) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	codecs := serializer.NewCodecFactory(scheme, serializer.EnableStrict)
	obj, gvk, err := codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		if runtime.IsStrictDecodingError(err) {
			return nil, fmt.Errorf("%w (nftproxy decodes strictly: remove or correct the field)", err)
		}
		return nil, fmt.Errorf("decode KubeProxyConfiguration: %w (want apiVersion %s, kind KubeProxyConfiguration)", err, v1alpha1.SchemeGroupVersion)
	}
	cfg, ok := obj.(*v1alpha1.KubeProxyConfiguration)
	if !ok {
		return nil, fmt.Errorf("got %v, want %s KubeProxyConfiguration", gvk, v1alpha1.SchemeGroupVersion)
	}
	return cfg, nil
}
