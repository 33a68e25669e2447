package tier

import (
	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
)

// ManifestFlags are the flags of `run` and `render` in manifest mode for the lab: the directory,
// fixture.NodeName, and the lab's pod and service CIDRs.
func ManifestFlags(dir string) []string {
	return []string{"--manifests", dir, "--node-name", fixture.NodeName,
		"--cluster-cidr", lab.PodCIDRv4 + "," + lab.PodCIDRv6,
		"--service-cidr", lab.ServiceCIDRv4 + "," + lab.ServiceCIDRv6}
}
