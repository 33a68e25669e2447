// Command nftproxy is a Kubernetes service proxy that programs nftables directly over netlink.
// See README.md at the repository root.
package main

import (
	"os"

	"github.com/nftproxy/nftproxy/cmd/nftproxy/app"
)

func main() { os.Exit(app.Main(os.Args, os.Stdout, os.Stderr)) }
