// Command nftproxy is a Kubernetes service proxy that programs nftables directly over netlink.
// See README.md at the repository root.
package main

import (
	"os"

	"github.com/nftproxy/nftproxy/cmd/nftproxy/app"
	"github.com/nftproxy/nftproxy/metrics"
	"github.com/nftproxy/nftproxy/proxy/k8s"
)

func main() {
	// Before any informer is built: the Kubernetes source and the node-port allocator stream
	// their initial lists (k8s.StreamInitialLists says why and how to turn it off).
	k8s.StreamInitialLists()
	// Before any API client is built: client-go binds a transport's garbage-collection counts
	// to the hooks in place when it creates the transport (metrics.InstallClientGoHooks).
	metrics.InstallClientGoHooks()
	os.Exit(app.Main(os.Args, os.Stdout, os.Stderr))
}
