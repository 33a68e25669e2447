// Command prepare builds (or finds in the cache) the binaries the integration tier runs:
// kube-apiserver, kube-proxy (two releases: the API server's and the newest the project compares
// against) and etcd, and with -node the node tier's kubelet,
// kube-controller-manager and kube-scheduler. CI runs it before `go test` so the first build,
// which takes minutes, is reported on its own line and does not count against a test timeout.
//
//	go run ./test/cluster/cmd/prepare [-node] [-timeout 45m]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nftproxy/nftproxy/test/cluster"
)

func main() {
	timeout := flag.Duration("timeout", 45*time.Minute, "give up after this long")
	node := flag.Bool("node", false, "also build kubelet, kube-controller-manager and kube-scheduler (test/node)")
	flag.Parse()
	if os.Getenv("NFTPROXY_UNIT_ONLY") != "" || os.Getenv("NFTPROXY_SKIP_CLUSTER") != "" {
		fmt.Println("cluster tier skipped (NFTPROXY_UNIT_ONLY or NFTPROXY_SKIP_CLUSTER set): nothing to build")
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	paths, err := cluster.Prepare(ctx, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prepare:", err)
		os.Exit(1)
	}
	fmt.Printf("cluster binaries ready in %s (Kubernetes %s, kube-proxy %s too, etcd %s):\n  %s\n  %s\n  %s\n  %s\n",
		time.Since(start).Round(time.Millisecond), cluster.KubeVersion, cluster.KubeProxyLatestVersion, cluster.EtcdVersion,
		paths.KubeAPIServer, paths.KubeProxy, paths.KubeProxies[cluster.KubeProxyLatestVersion], paths.Etcd)
	if !*node {
		return
	}
	start = time.Now()
	np, err := cluster.PrepareNode(ctx, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prepare:", err)
		os.Exit(1)
	}
	fmt.Printf("node binaries ready in %s:\n  %s\n  %s\n  %s\n",
		time.Since(start).Round(time.Millisecond), np.Kubelet, np.KubeControllerManager, np.KubeScheduler)
}
