package app

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/proxy/sysctl"
)

// TestInitReadsConfigConntrack: `nftproxy init --config FILE` applies the file's conntrack
// section (kube-proxy's defaults for what it leaves out), and a --conntrack-* flag given on the
// command line wins over the file.
func TestInitReadsConfigConntrack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.conf")
	if err := os.WriteFile(path, []byte(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
conntrack:
  maxPerCore: 65536
  tcpEstablishedTimeout: 2h0m0s
  udpTimeout: 30s
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var c sysctl.Conntrack
	fs := flag.NewFlagSet("init", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	registerConntrackFlags(fs, &c)
	if err := fs.Parse([]string{"--conntrack-udp-timeout=10s"}); err != nil {
		t.Fatal(err)
	}
	got, err := conntrackFromConfig(fs, path)
	if err != nil {
		t.Fatal(err)
	}
	want := sysctl.Defaults()
	want.MaxPerCore, want.TCPEstablishedTimeout, want.UDPTimeout = 65536, 2*time.Hour, 10*time.Second
	if got != want {
		t.Errorf("conntrack from the file and a flag: got %+v, want %+v", got, want)
	}
	if _, err := conntrackFromConfig(fs, filepath.Join(t.TempDir(), "missing.conf")); err == nil {
		t.Error("a missing --config file was accepted")
	}
}
